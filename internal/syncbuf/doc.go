// Package syncbuf is a bytes.Buffer that a child process's output streams
// write to while a test reads it: the tests' one such buffer. It knows
// nothing of processes.
package syncbuf
