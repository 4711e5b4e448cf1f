// Package stats holds the summary statistics the benchmark commands under
// examples/bench report.
package stats
