// Package readlimit reads a file a user named (--data) the way untrusted
// input must be read: bounded before it is allocated, whatever the file
// is (a regular file, a device such as /dev/zero whose size reads 0, a
// pipe or FIFO with no end), and cancellable, so that a FIFO nobody
// writes to ends on SIGTERM or SIGINT instead of blocking the program.
//
// It knows nothing of what the bytes mean.
package readlimit
