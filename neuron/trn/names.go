package trn

// The environment of a Neuron job, spelled here and nowhere else: the
// Neuron runtime's and PJRT plugin's variables (set as torch-xla's
// torch_xla/_internal/neuron.py sets them), the compiler's, EFA's
// (libfabric), and xladdp's own knobs for Trainium.
const (
	// EnvNumDevices and EnvCoreNumDevices give a job's NeuronCore count,
	// as torch-neuronx's launchers set them (the first wins).
	EnvNumDevices     = "NEURON_NUM_DEVICES"
	EnvCoreNumDevices = "NEURONCORE_NUM_DEVICES"
	// EnvVisibleCores lists the NeuronCores a process may use
	// ("0-3", "4,5").
	EnvVisibleCores = "NEURON_RT_VISIBLE_CORES"
	// EnvRootCommID is node 0's root communicator, HOST:PORT.
	EnvRootCommID = "NEURON_RT_ROOT_COMM_ID"
	// EnvStochasticRounding turns on bf16 stochastic rounding.
	EnvStochasticRounding = "NEURON_RT_STOCHASTIC_ROUNDING_EN"
	// EnvProcessIndex is the PJRT process index of a multi-process job;
	// EnvProcessesNumDevices the NeuronCores of each process (a list), or
	// EnvWorldSize their total (Neuron SDK 2.18 and later).
	EnvProcessIndex        = "NEURON_PJRT_PROCESS_INDEX"
	EnvProcessesNumDevices = "NEURON_PJRT_PROCESSES_NUM_DEVICES"
	EnvWorldSize           = "NEURON_PJRT_WORLD_SIZE"
	// EnvLocalProcessCount and EnvLocalProcessRank place a process among
	// its node's.
	EnvLocalProcessCount = "PJRT_LOCAL_PROCESS_COUNT"
	EnvLocalProcessRank  = "PJRT_LOCAL_PROCESS_RANK"
	// EnvCCFlags are neuronx-cc's flags; EnvCompileCacheURL is where
	// compiled NEFFs are kept (a directory or s3:// URL).
	EnvCCFlags         = "NEURON_CC_FLAGS"
	EnvCompileCacheURL = "NEURON_COMPILE_CACHE_URL"
	// EnvLibraryPath names libneuronpjrt.so directly.
	EnvLibraryPath = "NEURON_LIBRARY_PATH"
	// EnvPJRTAPIVersion tells libneuronxla 3's plugin which PJRT C API
	// version its client speaks ("0.104"): it serves several.
	EnvPJRTAPIVersion = "NEURON_INTERNAL_PJRT_C_API_VERSION"
	// EnvLogicalNCConfig is Trn2's logical NeuronCore setting: 2 (the
	// default) pairs the 8 physical cores of a chip into 4 logical ones,
	// 1 exposes all 8.
	EnvLogicalNCConfig = "NEURON_LOGICAL_NC_CONFIG"

	// EnvFIProvider, EnvFIEFAUseDeviceRDMA and EnvFIEFAForkSafe are
	// libfabric's, set for EFA across nodes.
	EnvFIProvider         = "FI_PROVIDER"
	EnvFIEFAUseDeviceRDMA = "FI_EFA_USE_DEVICE_RDMA"
	EnvFIEFAForkSafe      = "FI_EFA_FORK_SAFE"

	// EnvInstanceType overrides the instance type read from the machine.
	EnvInstanceType = "XLADDP_NEURON_INSTANCE_TYPE"
	// EnvPython is the Python whose libneuronxla the plugin bootstrap
	// imports.
	EnvPython = "XLADDP_NEURON_PYTHON"
	// EnvWorldSizeVariable ("1") selects EnvWorldSize over the
	// per-process list EnvProcessesNumDevices.
	EnvWorldSizeVariable = "XLADDP_NEURON_WORLD_SIZE_VARIABLE"
)
