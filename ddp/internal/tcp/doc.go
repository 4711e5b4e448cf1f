// Package tcp is the process group's default transport, registered as
// "tcp": a rendezvous through a store (env://, tcp://, file://), a full
// mesh of TCP connections between the ranks (each frame carrying its
// operation's descriptor, checked on receipt), rank-order folds, rings
// and one-round exchanges for the collectives, and, when every rank is on
// one host, a /dev/shm segment for all-reduce (shm.go), with a small
// all-reduce that runs on the caller's goroutine (shm_fast.go).
package tcp
