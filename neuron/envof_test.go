package neuron

// envOf is a getenv over kv.
func envOf(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }
