// Package safetensors reads and writes the safetensors file format
// (https://huggingface.co/docs/safetensors): an 8-byte little-endian header
// length, a JSON header mapping tensor names to dtype, shape and byte
// offsets (plus optional string metadata under "__metadata__"), then the raw
// little-endian tensor data. It knows the format only, not devices: package
// nn turns modules into and out of it.
//
// Files are validated completely before use: header size and JSON, known
// dtypes, sizes matching shapes, offsets inside the data, no overlaps and
// no holes. Every error names the file, the tensor and the byte offsets.
// WriteFile is atomic (temp file, fsync, rename, fsync of the directory).
package safetensors
