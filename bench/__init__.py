"""metalrt benchmarks (``python -m bench``); each module runs alone as well."""
