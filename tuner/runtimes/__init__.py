"""Device runtimes, one module per backend; CuPy is imported only when a GPU is asked for."""
