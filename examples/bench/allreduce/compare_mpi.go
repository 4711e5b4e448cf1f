//go:build mpi

package main

import "github.com/xladdp/xladdp/examples/bench/allreduce/rawmpi"

func init() { rawAllreduce = rawmpi.TimeAllreduce }
