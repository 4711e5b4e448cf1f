package neuron

import (
	"fmt"
	"strings"

	"github.com/xladdp/xladdp/neuron/trn"
	"golang.org/x/sys/unix"
)

// CompileOptions are the neuronx-cc settings xladdp composes into
// NEURON_CC_FLAGS.
type CompileOptions struct {
	// CacheDir is the compile cache (--cache_dir; NEURON_COMPILE_CACHE_URL
	// too). Keep it on a local disk: see CacheWarning.
	CacheDir string
	// RetryFailedCompilation recompiles graphs the cache marks as failed.
	RetryFailedCompilation bool
	// OptLevel is neuronx-cc's -O level (0: the compiler's default).
	OptLevel int
	// ModelType is --model-type (transformer, generic, ...; "": default).
	ModelType string
}

// CompilerEnvironment returns NEURON_CC_FLAGS (the user's flags kept, and
// xladdp's added only where the user gave no value for that flag) and
// NEURON_COMPILE_CACHE_URL (unless the user set it).
func CompilerEnvironment(o CompileOptions, getenv func(string) string) (map[string]string, error) {
	if o.OptLevel < 0 || o.OptLevel > 3 {
		return nil, fmt.Errorf("neuron: optimisation level %d: neuronx-cc takes -O0 to -O3", o.OptLevel)
	}
	user := getenv(trn.EnvCCFlags)
	has := func(flag string) bool {
		for _, f := range strings.Fields(user) {
			if f == flag || strings.HasPrefix(f, flag+"=") {
				return true
			}
		}
		return false
	}
	flags := strings.Fields(user)
	if o.CacheDir != "" && !has("--cache_dir") {
		flags = append(flags, "--cache_dir="+o.CacheDir)
	}
	if o.RetryFailedCompilation && !has("--retry_failed_compilation") {
		flags = append(flags, "--retry_failed_compilation")
	}
	if o.OptLevel > 0 && !has("-O1") && !has("-O2") && !has("-O3") && !has("--optlevel") {
		flags = append(flags, fmt.Sprintf("-O%d", o.OptLevel))
	}
	if o.ModelType != "" && !has("--model-type") {
		flags = append(flags, "--model-type="+o.ModelType)
	}
	env := map[string]string{}
	if joined := strings.Join(flags, " "); joined != user {
		env[trn.EnvCCFlags] = joined
	}
	if o.CacheDir != "" && getenv(trn.EnvCompileCacheURL) == "" {
		env[trn.EnvCompileCacheURL] = o.CacheDir
	}
	return env, nil
}

// Network filesystem magic numbers (statfs f_type).
const (
	nfsMagic    = 0x6969
	lustreMagic = 0x0bd00bd0
	smbMagic    = 0xfe534d42
	fuseMagic   = 0x65735546 // EFS mounts through NFS; s3fs and the like through FUSE
)

// CacheWarning returns a warning when dir sits on a network filesystem:
// the Neuron compile cache locks with files, which NFS/EFS/FSx break
// between hosts; use a per-host local directory. "" when local (or when
// dir does not exist yet).
func CacheWarning(dir string) string {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return ""
	}
	return cacheWarningFor(dir, uint32(st.Type))
}

func cacheWarningFor(dir string, fsType uint32) string {
	switch fsType {
	case nfsMagic, lustreMagic, smbMagic, fuseMagic:
		return fmt.Sprintf("neuron: the compile cache %s is on a network filesystem (type %#x): its file locks do not hold across hosts there; "+
			"use a local directory per host (for example /var/tmp/neuron-compile-cache)", dir, fsType)
	}
	return ""
}
