"""The names an execution plan chooses among, without importing torch (the command line's choices)."""

#: Exact float32 product kernels: ``torch.mm`` on ``W`` as stored, and oneDNN with ``W`` prepacked
#: into its blocked layout.
KERNELS = ("mm", "onednn")
#: How a plan picks the kernels: the fixed rule, or one kernel for all.
KERNEL_RULES = ("fixed", *KERNELS)
#: How the packed loop runs a level's two directions (the plan's ``level_order``): in one loop (gate
#: nonlinearities once over both, small step products batched) or one after the other (each direction's
#: weights stay in cache).
LEVEL_ORDERS = ("together", "apart")
#: How the packed loop runs each time step (the plan's ``steps``): called from Python (eager), on fixed
#: buffers (static), or on those buffers captured as CUDA graphs and replayed (graphs: CUDA only, its default).
STEP_MODES = ("eager", "static", "graphs")
#: The alignment in bytes of the weights the kernels read (PyTorch's CPU allocator's): the libraries' code
#: paths, and so the bits, may depend on it (a safetensors file's tensors start at any multiple of 8 bytes).
WEIGHT_ALIGNMENT = 64
