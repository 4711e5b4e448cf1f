package optim

import (
	"fmt"
	"math"
)

// Scheduler sets an optimizer's learning rate by epoch (or iteration), as
// torch.optim.lr_scheduler does: call Step after each epoch.
type Scheduler interface {
	// Step advances one epoch and sets the optimizer's new learning rate.
	Step()
	// Epoch returns how many Steps were taken.
	Epoch() int
}

// schedule applies lrAt(epoch) to an optimizer.
type schedule struct {
	opt   Optimizer
	epoch int
	lrAt  func(epoch int) float64
}

func newSchedule(opt Optimizer, lrAt func(int) float64) *schedule {
	s := &schedule{opt: opt, lrAt: lrAt}
	opt.SetLR(lrAt(0))
	return s
}

func (s *schedule) Step() {
	s.epoch++
	s.opt.SetLR(s.lrAt(s.epoch))
}

func (s *schedule) Epoch() int { return s.epoch }

// NewStepLR multiplies the learning rate by gamma every stepSize epochs
// (torch's StepLR).
func NewStepLR(opt Optimizer, stepSize int, gamma float64) (Scheduler, error) {
	if stepSize < 1 || gamma <= 0 {
		return nil, fmt.Errorf("optim: StepLR step size %d must be >= 1 and gamma %g > 0", stepSize, gamma)
	}
	base := opt.LR()
	return newSchedule(opt, func(e int) float64 { return base * math.Pow(gamma, float64(e/stepSize)) }), nil
}

// NewCosineAnnealingLR follows half a cosine from the initial rate down to
// etaMin over tMax epochs, and back up after (torch's CosineAnnealingLR).
func NewCosineAnnealingLR(opt Optimizer, tMax int, etaMin float64) (Scheduler, error) {
	if tMax < 1 {
		return nil, fmt.Errorf("optim: CosineAnnealingLR T_max %d must be >= 1", tMax)
	}
	base := opt.LR()
	return newSchedule(opt, func(e int) float64 {
		return etaMin + (base-etaMin)*(1+math.Cos(math.Pi*float64(e)/float64(tMax)))/2
	}), nil
}

// NewLinearWarmup ramps the learning rate linearly from startFactor times
// the initial rate to the initial rate over totalIters steps (torch's
// LinearLR with end_factor 1).
func NewLinearWarmup(opt Optimizer, startFactor float64, totalIters int) (Scheduler, error) {
	if startFactor <= 0 || startFactor > 1 || totalIters < 1 {
		return nil, fmt.Errorf("optim: LinearWarmup start factor %g must be in (0, 1] and iterations %d >= 1", startFactor, totalIters)
	}
	base := opt.LR()
	return newSchedule(opt, func(e int) float64 {
		return base * (startFactor + (1-startFactor)*float64(min(e, totalIters))/float64(totalIters))
	}), nil
}

// NewWarmupCosine is the transformer schedule (nanoGPT's get_lr): the
// rate rises linearly to the initial rate over warmup iterations
// (lr·(it+1)/(warmup+1)), then follows half a cosine down to minLR at
// iteration decayIters, and stays at minLR after. Call Step after each
// optimizer step; the rate is a program input, so no step recompiles.
func NewWarmupCosine(opt Optimizer, warmup, decayIters int, minLR float64) (Scheduler, error) {
	base := opt.LR()
	if warmup < 0 || decayIters <= warmup || !(minLR >= 0) || minLR > base {
		return nil, fmt.Errorf("optim: WarmupCosine(warmup %d, decay %d, min %g): needs 0 <= warmup < decay iterations and 0 <= min lr <= lr %g", warmup, decayIters, minLR, base)
	}
	return newSchedule(opt, func(it int) float64 {
		switch {
		case it < warmup:
			return base * float64(it+1) / float64(warmup+1)
		case it > decayIters:
			return minLR
		}
		ratio := float64(it-warmup) / float64(decayIters-warmup)
		return minLR + (base-minLR)*0.5*(1+math.Cos(math.Pi*ratio))
	}), nil
}
