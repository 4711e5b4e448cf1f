package checkpoint

import (
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"

	"github.com/spf13/pflag"
)

// settingPrefix marks a setting in a checkpoint's metadata.
const settingPrefix = "setting."

// Record sets o.Settings from fs's parsed flags named: the values that
// change what training computes (a learning rate, a batch size, a seed),
// which every checkpoint then records and a resume must match. Call it
// after parsing.
func (o *Options) Record(fs *pflag.FlagSet, names ...string) error {
	if o.Settings == nil {
		o.Settings = map[string]string{}
	}
	for _, name := range names {
		f := fs.Lookup(name)
		if f == nil {
			return fmt.Errorf("checkpoint: Record: the program has no flag --%s", name)
		}
		o.Settings[name] = f.Value.String()
	}
	return nil
}

// checkOverride refuses an --resume-override naming no setting.
func (o Options) checkOverride() error {
	for _, name := range o.Override {
		if _, ok := o.Settings[name]; !ok {
			return fmt.Errorf("checkpoint: --resume-override %s: not a setting this program's checkpoints record (%s)",
				name, settingNames(o.Settings))
		}
	}
	return nil
}

func settingNames(s map[string]string) string {
	if len(s) == 0 {
		return "it records none"
	}
	return "it records " + strings.Join(slices.Sorted(maps.Keys(s)), ", ")
}

// withSettings is meta with o's settings recorded.
func (o Options) withSettings(meta map[string]string) map[string]string {
	if len(o.Settings) == 0 {
		return meta
	}
	out := maps.Clone(meta)
	if out == nil {
		out = map[string]string{}
	}
	for k, v := range o.Settings {
		out[settingPrefix+k] = v
	}
	return out
}

// checkSettings refuses resuming from a checkpoint (at path, its
// metadata meta) that recorded other settings than this run's, naming
// each as --flag was → now, unless --resume-override names it: then the
// change is logged. A setting the checkpoint lacks (one written before
// the program recorded it) passes.
func (o Options) checkSettings(path string, meta map[string]string) error {
	var changed, refused []string
	for _, name := range slices.Sorted(maps.Keys(o.Settings)) {
		was, ok := meta[settingPrefix+name]
		if !ok || was == o.Settings[name] {
			continue
		}
		change := fmt.Sprintf("--%s %s → %s", name, was, o.Settings[name])
		if slices.Contains(o.Override, name) {
			changed = append(changed, change)
			continue
		}
		refused = append(refused, change)
	}
	if len(refused) > 0 {
		return fmt.Errorf("checkpoint: %s was written with other settings: %s; resuming would train on with the new values "+
			"from the old run's state: give the checkpoint's values, or say --resume-override %s to change them",
			path, strings.Join(refused, ", "), overrideNames(refused))
	}
	if len(changed) > 0 {
		slog.Warn("checkpoint: resuming with changed settings (--resume-override)", "checkpoint", path, "changes", strings.Join(changed, ", "))
	}
	return nil
}

// overrideNames is the flag names of changes, as --resume-override takes them.
func overrideNames(changes []string) string {
	names := make([]string, len(changes))
	for i, c := range changes {
		names[i] = strings.TrimPrefix(strings.Fields(c)[0], "--")
	}
	return strings.Join(names, ",")
}
