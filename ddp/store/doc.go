// Package store is the key-value store processes rendezvous through, like
// torch.distributed's TCPStore and FileStore: Set, Get (blocking until the
// key exists), Add (an atomic counter), CompareSet, Wait, Delete, NumKeys.
//
// The TCP store is one server (rank 0 or the launcher agent) and a client
// per process, speaking a length-prefixed binary protocol with a maximum
// message size. With a shared secret (XLADDP_STORE_TOKEN) every client must
// answer an HMAC-SHA256 challenge before its first command, so a stray
// process cannot join or read keys; torch's store has no such check.
// The file store keeps the same operations in a file shared by processes
// (torch's file:// init method), safe under concurrent use via flock.
package store
