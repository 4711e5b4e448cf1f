// Package report is what every training example shows its user: a
// progress bar on rank 0 (a plain line every N steps when the output is
// not a terminal), test accuracy, and loss and accuracy curves drawn to a
// PNG.
package report
