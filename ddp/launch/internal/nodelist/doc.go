// Package nodelist expands SLURM host lists ($SLURM_JOB_NODELIST) as
// `scontrol show hostnames` does, within a bound on the number of hosts
// checked before anything is allocated. It is its own package so that its
// fuzz target builds without the rest of the launcher.
package nodelist
