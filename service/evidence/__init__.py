"""Why a culprit got slower (issue 43): the profiled trials at its two ends, diffed (kernels,
compiled code, autotuner choice, environment), plus hunk localization where it ran."""
