package cmdline

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/pflag"
)

// SageMakerHyperparameters sets fs's flags from $SM_HPS, the JSON object
// of hyperparameters SageMaker gives a training job, so flags given on the
// command line (parsed after) still win. A key names a flag as is or with
// '_' for '-'; keys SageMaker adds itself (sagemaker_*) are skipped. An
// unknown key or a value that is not a string, number or boolean is an
// error naming it, so a misspelt hyperparameter does not train with the
// default.
func SageMakerHyperparameters(fs *pflag.FlagSet, hps string) error {
	if strings.TrimSpace(hps) == "" {
		return nil
	}
	dec := json.NewDecoder(strings.NewReader(hps))
	dec.UseNumber()
	var values map[string]any
	if err := dec.Decode(&values); err != nil {
		return fmt.Errorf("$SM_HPS=%q: want a JSON object of hyperparameters: %w", hps, err)
	}
	keys := make([]string, 0, len(values))
	for k := range values {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, key := range keys {
		if strings.HasPrefix(key, "sagemaker_") {
			continue
		}
		name := key
		if fs.Lookup(name) == nil {
			name = strings.ReplaceAll(key, "_", "-")
		}
		if fs.Lookup(name) == nil || name == "help" {
			return fmt.Errorf("$SM_HPS: hyperparameter %q is not a flag of %s (see %s --help)", key, fs.Name(), fs.Name())
		}
		var value string
		switch v := values[key].(type) {
		case string:
			value = v
		case json.Number:
			value = v.String()
		case bool:
			value = fmt.Sprint(v)
		default:
			raw, _ := json.Marshal(v)
			return fmt.Errorf("$SM_HPS: hyperparameter %q = %s: want a string, number or boolean", key, bytes.TrimSpace(raw))
		}
		if err := fs.Set(name, value); err != nil {
			return fmt.Errorf("$SM_HPS: hyperparameter %q: %w", key, err)
		}
	}
	return nil
}
