package cmdline

import (
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSageMakerHyperparameters(t *testing.T) {
	for _, tc := range []struct {
		name, hps string
		args      []string
		epochs    int
		lr        float64
		pretrain  string
		freeze    bool
		want      string // error
	}{
		{name: "none", epochs: 1, lr: 0.5},
		{name: "blank", hps: "  ", epochs: 1, lr: 0.5},
		{name: "numbers, strings, booleans; _ for -", hps: `{"epochs": 3, "learning_rate": "0.01", "pretrained": "/opt/ml/input/r.safetensors", "freeze": true}`,
			epochs: 3, lr: 0.01, pretrain: "/opt/ml/input/r.safetensors", freeze: true},
		{name: "the command line wins", hps: `{"epochs": 3}`, args: []string{"--epochs", "5"}, epochs: 5, lr: 0.5},
		{name: "SageMaker's own keys are skipped", hps: `{"sagemaker_program": "train", "sagemaker_region": "us-west-2"}`, epochs: 1, lr: 0.5},
		{name: "unknown key", hps: `{"epoch": 3}`, want: `hyperparameter "epoch" is not a flag of finetune`},
		{name: "help is not a hyperparameter", hps: `{"help": true}`, want: `hyperparameter "help" is not a flag`},
		{name: "bad value", hps: `{"epochs": "three"}`, want: `hyperparameter "epochs": invalid argument "three"`},
		{name: "fraction for an int", hps: `{"epochs": 2.5}`, want: `hyperparameter "epochs"`},
		{name: "a list", hps: `{"epochs": [1, 2]}`, want: `hyperparameter "epochs" = [1,2]: want a string, number or boolean`},
		{name: "null", hps: `{"epochs": null}`, want: `hyperparameter "epochs" = null`},
		{name: "not an object", hps: `[1]`, want: "want a JSON object of hyperparameters"},
		{name: "half-written", hps: `{"epochs": 3`, want: "want a JSON object of hyperparameters"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs, _ := FlagSet("finetune", io.Discard)
			epochs := fs.Int("epochs", 1, "")
			lr := fs.Float64("learning-rate", 0.5, "")
			pretrained := fs.String("pretrained", "", "")
			freeze := fs.Bool("freeze", false, "")
			err := SageMakerHyperparameters(fs, tc.hps)
			if tc.want != "" {
				assert.ErrorContains(t, err, tc.want)
				return
			}
			require.NoError(t, err)
			require.NoError(t, Parse(fs, tc.args))
			assert.Equal(t, tc.epochs, *epochs)
			assert.Equal(t, tc.lr, *lr)
			assert.Equal(t, tc.pretrain, *pretrained)
			assert.Equal(t, tc.freeze, *freeze)
		})
	}
}
