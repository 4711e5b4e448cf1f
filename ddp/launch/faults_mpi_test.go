//go:build mpi

package launch

// The fault suite runs on the mpi backend too, under mpirun.
func init() {
	faultBackends = append(faultBackends, faultBackend{name: "mpi", args: []string{"--backend=mpi"}})
}
