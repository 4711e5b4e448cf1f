package data

import (
	"image"
	"math"
	"math/rand/v2"

	"golang.org/x/image/draw"
)

// Transform changes an image, like a torchvision transform; random ones
// draw from rng, which the dataset seeds per epoch and sample.
type Transform interface {
	Apply(img image.Image, rng *rand.Rand) image.Image
}

// Resize scales the shorter side to Size, keeping the aspect ratio
// (torchvision's Resize(int)), with bilinear interpolation.
type Resize struct{ Size int }

// Apply resizes img.
func (r Resize) Apply(img image.Image, _ *rand.Rand) image.Image {
	b := img.Bounds()
	w, h := b.Dx(), b.Dy()
	if w <= h {
		h = int(math.Round(float64(h) * float64(r.Size) / float64(w)))
		w = r.Size
	} else {
		w = int(math.Round(float64(w) * float64(r.Size) / float64(h)))
		h = r.Size
	}
	return scale(img, b, w, h)
}

func scale(img image.Image, src image.Rectangle, w, h int) image.Image {
	out := image.NewRGBA(image.Rect(0, 0, w, h))
	draw.BiLinear.Scale(out, out.Bounds(), img, src, draw.Src, nil)
	return out
}

// CenterCrop cuts the central Size×Size square (torchvision's CenterCrop).
type CenterCrop struct{ Size int }

// Apply crops img; an image smaller than Size is returned as is and the
// dataset reports the wrong size.
func (c CenterCrop) Apply(img image.Image, _ *rand.Rand) image.Image {
	b := img.Bounds()
	if b.Dx() < c.Size || b.Dy() < c.Size {
		return img
	}
	x0 := b.Min.X + int(math.Round(float64(b.Dx()-c.Size)/2))
	y0 := b.Min.Y + int(math.Round(float64(b.Dy()-c.Size)/2))
	return crop(img, image.Rect(x0, y0, x0+c.Size, y0+c.Size))
}

func crop(img image.Image, r image.Rectangle) image.Image {
	out := image.NewRGBA(image.Rect(0, 0, r.Dx(), r.Dy()))
	draw.Copy(out, image.Point{}, img, r, draw.Src, nil)
	return out
}

// RandomResizedCrop picks a random area (8%–100%) and aspect ratio
// (3/4–4/3) and scales it to Size×Size, as torchvision's
// RandomResizedCrop does; after 10 failed draws it takes the center.
type RandomResizedCrop struct{ Size int }

// Apply crops and resizes img.
func (c RandomResizedCrop) Apply(img image.Image, rng *rand.Rand) image.Image {
	b := img.Bounds()
	area := float64(b.Dx() * b.Dy())
	for range 10 {
		target := area * (0.08 + rng.Float64()*(1-0.08))
		logRatio := math.Log(3.0/4) + rng.Float64()*(math.Log(4.0/3)-math.Log(3.0/4))
		ratio := math.Exp(logRatio)
		w := int(math.Round(math.Sqrt(target * ratio)))
		h := int(math.Round(math.Sqrt(target / ratio)))
		if w > 0 && h > 0 && w <= b.Dx() && h <= b.Dy() {
			x0 := b.Min.X + rng.IntN(b.Dx()-w+1)
			y0 := b.Min.Y + rng.IntN(b.Dy()-h+1)
			return scale(img, image.Rect(x0, y0, x0+w, y0+h), c.Size, c.Size)
		}
	}
	side := min(b.Dx(), b.Dy())
	x0 := b.Min.X + (b.Dx()-side)/2
	y0 := b.Min.Y + (b.Dy()-side)/2
	return scale(img, image.Rect(x0, y0, x0+side, y0+side), c.Size, c.Size)
}

// RandomHorizontalFlip mirrors the image with probability P.
type RandomHorizontalFlip struct{ P float64 }

// Apply flips img or returns it.
func (f RandomHorizontalFlip) Apply(img image.Image, rng *rand.Rand) image.Image {
	if rng.Float64() >= f.P {
		return img
	}
	b := img.Bounds()
	out := image.NewRGBA(image.Rect(0, 0, b.Dx(), b.Dy()))
	for y := 0; y < b.Dy(); y++ {
		for x := 0; x < b.Dx(); x++ {
			out.Set(b.Dx()-1-x, y, img.At(b.Min.X+x, b.Min.Y+y))
		}
	}
	return out
}
