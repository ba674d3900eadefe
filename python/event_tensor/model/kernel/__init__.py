"""The decode-step kernel, one module per phase (`model.builder.build_decode_kernel`
calls them in order):

- `context`: `DecodeContext`, what the phases share (shapes, layout,
  options, the `et.kernel` and its arguments, events, task helpers);
- `buffers`: the kernel's arguments and the norm scratch's size;
- `views` and `tiles`: memref types and views; how work is cut into tiles;
- `linear`: linear-layer tiles and the fused norms that feed them;
- `embedding`: h = embed[tokens];
- `attention`: norm1, qkv, qk (RoPE, KV append), attn, merge, o;
- `mlp`: norm2, gate/up with the activation, down;
- `layers`: a layer's tasks joined (fused norms, tensor-parallel sums) and
  emitted per layer or layered;
- `head`: final norm, LM head, greedy argmax.

Needs MLIR."""
