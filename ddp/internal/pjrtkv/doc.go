// Package pjrtkv serves a PJRT plugin's distributed runtime from the
// job's store: the key-value get, try-get and put that
// PJRT_Client_Create's callbacks make (backend.Options.KeyValue), with
// which a CUDA plugin forms NCCL communicators across processes.
//
// Every key is kept under the job's run id and attempt, so a restarted
// job never reads the last attempt's values; every value is bounded
// (MaxValue) and sealed with its key and scope (an HMAC under the job's
// store token when one is set), so a value a peer wrote to the store by
// hand, copied from another key or attempt, or made too large is refused
// by name instead of handed to the plugin.
//
// It knows the store and nothing of PJRT, plugins or devices.
package pjrtkv
