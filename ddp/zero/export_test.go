package zero

// CommittedStep reads and verifies the sharded checkpoint in dir (every
// file against its manifest) and returns its step, for the external tests.
func CommittedStep(dir string) (int, error) {
	ck, err := readShardedCheckpoint(dir)
	if err != nil {
		return 0, err
	}
	return ck.manifest.Step, nil
}
