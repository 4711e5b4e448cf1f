package backend

import "fmt"

// Device is one addressable device of a backend.
type Device struct {
	// Num is the device's position among the backend's addressable devices:
	// GoMLX's DeviceNum, and the index replicas use.
	Num int
	// ID is the plugin's global device id (unique across processes).
	ID int
	// Kind is the vendor's device kind, e.g. "cpu" or "NVIDIA H100 80GB HBM3".
	Kind string
	// ProcessIndex is the process the device belongs to (0 when single-process).
	ProcessIndex int
	// LocalHardwareID is the plugin's hardware id (the CUDA ordinal on GPUs), -1 if undefined.
	LocalHardwareID int
	// Description is the plugin's debug string, e.g. "cpu:0".
	Description string
}

// String returns a one-line description.
func (d Device) String() string {
	return fmt.Sprintf("device %d: id=%d kind=%q process=%d hw=%d (%s)",
		d.Num, d.ID, d.Kind, d.ProcessIndex, d.LocalHardwareID, d.Description)
}
