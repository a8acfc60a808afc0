"""What the device runtimes read, written once for the compiler and the host runtime alike:
how a delegate's tensors reach the NPU, the payload format, a converted partition with its
I/O, and the program's int8 I/O conversions."""
