// Package atomicfile writes a small file whole: through a new temporary
// file in the same directory, renamed over the path. Whatever stood at
// the path (a FIFO, a device, a symlink) is replaced, never opened, and a
// directory there fails the rename. It knows nothing of what the file
// holds.
package atomicfile
