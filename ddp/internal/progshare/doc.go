// Package progshare shares compiled programs among a job's processes
// through its store: the first process to need a program compiles it and
// publishes it in bounded, checksummed chunks; the others fetch it, or
// load it from their disk cache, and the last of the job's processes to
// have it frees it. It implements xla.ProgramExchange.
//
// It knows nothing of programs but their bytes, nor of devices.
package progshare
