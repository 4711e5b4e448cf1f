// Package freeport picks a TCP port nothing listens on, for a store or a
// job's rendezvous that a child process will bind (launchers, benches).
package freeport
