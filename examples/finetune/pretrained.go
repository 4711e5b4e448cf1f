package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/xladdp/xladdp/xla/nn"
	"github.com/xladdp/xladdp/xla/safetensors"
)

// loadPretrained loads every tensor of net but fc from weights, a
// ResNet-18 state dict with torchvision's names (or one of our
// checkpoints, where they start with "model."), as torch's
// load_state_dict(strict=False) after `model.fc = nn.Linear(512, k)`:
// the new fc keeps its fresh initialisation. A missing, unexpected or
// mis-shaped tensor is an error that lists them. It returns how many
// tensors it loaded and the file's fc shape.
func loadPretrained(net *nn.ResNet, weights safetensors.File, source string) (loaded int, fileFC []int, err error) {
	prefix := ""
	if _, ok := weights.Lookup("conv1.weight"); !ok {
		if _, ok := weights.Lookup("model.conv1.weight"); !ok {
			return 0, nil, fmt.Errorf("%s is not a ResNet-18 state dict: it has no conv1.weight (want torchvision's names)", source)
		}
		prefix = "model."
	}
	if fc, ok := weights.Lookup(prefix + "fc.weight"); ok {
		fileFC = fc.Shape
	}
	backbone := safetensors.File{Metadata: weights.Metadata}
	for _, t := range weights.Tensors {
		if !strings.HasPrefix(t.Name, prefix+"fc.") {
			backbone.Tensors = append(backbone.Tensors, t)
		}
	}
	named := slices.DeleteFunc(nn.StateDict(net), func(n nn.Named) bool { return strings.HasPrefix(n.Name, "fc.") })
	if err := nn.AssignTensors(named, backbone, prefix, source); err != nil {
		return 0, nil, err
	}
	return len(named), fileFC, nil
}
