// Package determinism holds the tests of ddp's deterministic mode
// (ddp.Deterministic) on real CPU engines. They live in a package of
// their own because a process's first CPU backend fixes how XLA compiles
// for the whole process (backend.Options.Deterministic): every engine of
// this test binary is a deterministic one. It has no code of its own.
package determinism
