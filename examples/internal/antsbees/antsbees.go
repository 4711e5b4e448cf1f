// Package antsbees writes a small ImageFolder shaped like the transfer
// learning tutorial's hymenoptera_data (train/ and val/, each with ants/
// and bees/), of generated pictures a network can tell apart: reddish
// noise for ants, yellow and black stripes for bees. finetune --synthetic
// trains on it without the tutorial's download; the tests use it as a
// fixture. It knows nothing of training.
package antsbees

import (
	"bytes"
	"fmt"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"math/rand/v2"
	"os"
	"path/filepath"
)

// Classes are the folder's classes, as the tutorial names them.
var Classes = []string{"ants", "bees"}

// Write writes perClass training pictures and perClass/2 validation
// pictures of each class under root (every other one a PNG, the rest
// JPEGs, as real folders mix them), the same for the same seed.
func Write(root string, perClass int, seed uint64) error {
	rng := rand.New(rand.NewPCG(seed, seed+1))
	for _, split := range []struct {
		name string
		n    int
	}{{"train", perClass}, {"val", perClass / 2}} {
		for _, class := range Classes {
			dir := filepath.Join(root, split.name, class)
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return err
			}
			for i := range split.n {
				if err := writeOne(dir, class, i, draw(rng, class)); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// writeOne encodes picture i of class into dir.
func writeOne(dir, class string, i int, img image.Image) error {
	var b bytes.Buffer
	name := fmt.Sprintf("%s_%d.png", class, i)
	err := png.Encode(&b, img)
	if i%2 == 0 {
		b.Reset()
		name = fmt.Sprintf("%s_%d.jpg", class, i)
		err = jpeg.Encode(&b, img, &jpeg.Options{Quality: 90})
	}
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, name), b.Bytes(), 0o644)
}

// draw is one picture of class, of a random size from 36 to 71 pixels.
func draw(rng *rand.Rand, class string) image.Image {
	w, h := 36+rng.IntN(36), 36+rng.IntN(36)
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	period := 6 + rng.IntN(6)
	for y := range h {
		for x := range w {
			n := rng.IntN(50)
			c := color.RGBA{uint8(120 + n), uint8(30 + n), uint8(20 + n), 255}
			if class == "bees" {
				c = color.RGBA{uint8(200 + n), uint8(170 + n), uint8(20 + n), 255}
				if x%period < period/2 {
					c = color.RGBA{uint8(n), uint8(n), uint8(n), 255}
				}
			}
			img.Set(x, y, c)
		}
	}
	return img
}
