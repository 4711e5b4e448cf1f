// Package flight is the collective flight recorder: a fixed ring of the
// last operations a process group issued (sequence number, op, dtype,
// element count, the user code's file:line, issue, start and end times,
// state), recorded on every path without allocating, and read back as a
// dump when something hangs or fails.
package flight
