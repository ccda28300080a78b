"""CUDA C++ sources of the GPU algorithms (read as text and compiled by CuPy at run time)."""
