// Package quote puts values that came from outside (environment variables,
// files, a peer's messages) into error messages: quoted, so control bytes
// cannot forge lines, and cut short, so a 64 MiB value is not echoed whole.
package quote
