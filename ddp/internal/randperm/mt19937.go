package randperm

// mt19937 is the 32-bit Mersenne Twister torch's CPU generator draws from
// (at::mt19937), so DistributedSampler's shuffle matches torch's
// randperm for the same seed.
type mt19937 struct {
	state [624]uint32
	next  int
}

// newMT19937 seeds like torch's Generator.manual_seed: the low 32 bits.
func newMT19937(seed uint64) *mt19937 {
	m := &mt19937{next: 624}
	m.state[0] = uint32(seed)
	for i := 1; i < 624; i++ {
		prev := m.state[i-1]
		m.state[i] = 1812433253*(prev^(prev>>30)) + uint32(i)
	}
	return m
}

func (m *mt19937) uint32() uint32 {
	if m.next >= 624 {
		m.twist()
	}
	y := m.state[m.next]
	m.next++
	y ^= y >> 11
	y ^= (y << 7) & 0x9d2c5680
	y ^= (y << 15) & 0xefc60000
	y ^= y >> 18
	return y
}

func (m *mt19937) twist() {
	for i := range 624 {
		y := (m.state[i] & 0x80000000) | (m.state[(i+1)%624] & 0x7fffffff)
		v := m.state[(i+397)%624] ^ (y >> 1)
		if y&1 != 0 {
			v ^= 0x9908b0df
		}
		m.state[i] = v
	}
	m.next = 0
}

// Torch is torch.randperm(n, generator=manual_seed(seed)) on the
// CPU: a Fisher-Yates pass drawing one 32-bit value per position.
func Torch(n int, seed uint64) []int {
	p := make([]int, n)
	for i := range p {
		p[i] = i
	}
	m := newMT19937(seed)
	for i := 0; i < n-1; i++ {
		z := int(uint64(m.uint32()) % uint64(n-i))
		p[i], p[z+i] = p[z+i], p[i]
	}
	return p
}
