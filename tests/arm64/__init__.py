"""The ARM64 job (issue 39): models converted and run on x86, then run again by the cross-compiled benchmark_lite under
qemu-user's ARM CPU models (python -m tests.arm64.run; docs/arm64.md)."""
