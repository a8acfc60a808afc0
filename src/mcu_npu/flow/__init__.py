"""The compile flow: ``run.compile_program`` calls the stages in order, each a function of its
own module taking and returning plain values.

====================  =========================================================================
``options``           the options of a compile as one checked value (``CompileOptions``)
``inputs``            the data (example inputs, calibration, accuracy samples) checked
``export``            ``torch.export`` of the float model
``rewrite``           the target's ATen passes, node ids tagged
``place``             where every node runs, by a trial quantization (the ``Plan``)
``quantize``          PTQ or QAT with the target's rules, int16 where asked
``edge``              the quantized reference in the Edge dialect
``lower``             NPU partitions delegated, the rest on Cortex-M kernels
``int8_io``           with ``io="int8"``, the program's boundary quantize / dequantize removed
``report``            the compile report of the lowered program
``serialize``         the report stored in the program, the ``.pte`` bytes
``check``             the ``.pte`` read back: layouts, kernels, memory
``measure``           the ``.pte`` run on the host: accuracy, per-layer error
====================  =========================================================================

``auto_precision`` searches over whole compiles for ``precision="auto"``; ``collector`` keeps
the garbage collector's full passes during a compile to what the compile made.
"""
