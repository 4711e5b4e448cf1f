package safetensors

import (
	"bytes"
	"path/filepath"
	"strings"
)

// legacyTorchMagic starts every torch.save file of the legacy format
// (before torch 1.6): a protocol-2 pickle of torch's magic number.
var legacyTorchMagic = []byte{0x80, 0x02, 0x8a, 0x0a, 0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19}

// isTorchPickle reports whether data starts like a torch.save file: a zip
// archive (torch ≥ 1.6) or the legacy pickle. Decode asks only once the
// first 8 bytes fail as a header length, so no safetensors file is taken
// for one.
func isTorchPickle(data []byte) bool {
	return bytes.HasPrefix(data, []byte("PK\x03\x04")) || bytes.HasPrefix(data, legacyTorchMagic)
}

// torchConversionHint says what the file is and the one command that
// turns it into safetensors with the same tensor names.
func torchConversionHint(name string) string {
	out := strings.TrimSuffix(name, filepath.Ext(name)) + ".safetensors"
	return "this is a PyTorch file (torch.save's .pth/.pt format), not safetensors; convert its state dict once with\n" +
		"  python3 -c 'import sys, torch; from safetensors.torch import save_file; sd = torch.load(sys.argv[1], map_location=\"cpu\"); " +
		"save_file({k: v.contiguous() for k, v in sd.get(\"state_dict\", sd).items()}, sys.argv[2])' " +
		shellQuote(name) + " " + shellQuote(out) + "\n(pip install torch safetensors) and pass " + out
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
