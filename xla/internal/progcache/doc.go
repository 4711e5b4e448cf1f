// Package progcache caches compiled programs, in memory and on disk,
// knowing nothing of devices or traces: a program is a Key (the caller's
// fingerprint and device set) and whatever the caller compiles for it.
//
// Cache.Get compiles outside its lock, so two different programs compile
// at once while callers of the same one share its single compilation; the
// caller's ctx bounds its wait, not the compilation, which runs on the
// cache's own goroutine and lands in the cache for the next caller
// (Close waits for it). Disk holds serialized executables across runs,
// under a Header that names everything deciding the executable, with
// LoweringIdentity naming the code that lowered it.
package progcache
