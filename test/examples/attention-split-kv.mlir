// RUN: et-opt %s --et-verify-event-graph=emit-counts --verify-diagnostics --verify-roundtrip | FileCheck %s
// RUN: et-opt %s --et-static-schedule=workers=4 --verify-roundtrip | FileCheck %s --check-prefix=STATIC
// RUN: et-opt %s --et-dynamic-schedule=workers=4 --verify-roundtrip | FileCheck %s --check-prefix=DYNAMIC

// A decoder attention block at decode: RMSNorm (one tile) broadcast to the
// QKV projection, decode attention split along the sequence into a runtime
// number of KV splits per KV head, a merge (log-sum-exp combine) per head
// that needs all splits, and the output projection that needs every head.
// CHECK-LABEL: et.kernel @attention
et.kernel @attention(%x: memref<1x2048xbf16>, %kv: memref<?x8x128xbf16>, %out: memref<1x2048xbf16>,
                     %splits: index) {
  %c1 = arith.constant 1 : index
  %c8 = arith.constant 8 : index
  %c32 = arith.constant 32 : index
  %c16 = arith.constant 16 : index
  // expected-remark @+1 {{expected count: static, 1}}
  %normed = et.event.create() : !et.event<>
  // expected-remark @+1 {{expected count: static, 4}}
  %qkv = et.event.create() : !et.event<8>
  // expected-remark @+1 {{expected count: symbolic, arg3}}
  %partial = et.event.create() : !et.event<8>
  // expected-remark @+1 {{expected count: static, 8}}
  %merged = et.event.create() : !et.event<>
  et.task @rmsnorm tiles(%t) in (%c1) attributes {et.cost = #et.cost<bytes = 8192, flops = 8192>} {
    et.event.signal %normed[] : !et.event<>
  }
  // 32 column tiles; 4 of them belong to each KV head.
  et.task @qkv_proj tiles(%n) in (%c32) attributes {et.cost = #et.cost<bytes = 393216, flops = 393216, prologue_bytes = 389120>} {
    et.event.wait %normed[] : !et.event<>
    %head = affine.apply affine_map<(d0) -> (d0 floordiv 4)>(%n)
    et.event.signal %qkv[%head] : !et.event<8>
  }
  // CHECK: et.task @attn_split tiles
  et.task @attn_split tiles(%head, %s) in (%c8, %splits) attributes {et.cost = #et.cost<bytes = 65536, flops = 65536, prologue_bytes = 61440>} {
    et.event.wait %qkv[%head] : !et.event<8>
    et.event.signal %partial[%head] : !et.event<8>
  }
  et.task @merge tiles(%head) in (%c8) attributes {et.cost = #et.cost<bytes = 4096, flops = 4096>} {
    et.event.wait %partial[%head] : !et.event<8>
    et.event.signal %merged[] : !et.event<>
  }
  et.task @o_proj tiles(%n) in (%c16) attributes {et.cost = #et.cost<bytes = 524288, flops = 524288, prologue_bytes = 520192>} {
    et.event.wait %merged[] : !et.event<>
  }
}

// The static schedule lists the tiles of every task with a compile-time tile
// count per worker; the KV splits (a runtime count) are spread by formula.
// STATIC-LABEL: et.kernel @attention
// STATIC: et.schedule static workers(4) attributes {cost_model = #et.cost_model<bandwidth_gbps = 4800, gflops = 989000, dispatch_ns = 300, sync_ns = 1000>} {
// STATIC-NEXT: et.worker 0 {
// STATIC-NEXT: et.run @rmsnorm tiles [0]
// STATIC-NEXT: et.run @qkv_proj tiles [0, 1, 5,
// STATIC-NEXT: et.run @attn_split cyclic [[OFF:[0-9]+]]
// STATIC-NEXT: et.run @merge tiles [0, 4]
// STATIC-NEXT: et.run @o_proj tiles [0, 4, 8, 12]
// STATIC: et.worker 3 {
// STATIC-NEXT: et.run @qkv_proj tiles [4, 8,
// STATIC-NEXT: et.run @attn_split cyclic [[OFF]]
// STATIC-NEXT: et.run @merge tiles [3, 7]
// STATIC-NEXT: et.run @o_proj tiles [3, 7, 11, 15]
// STATIC-NEXT: }
// STATIC-NEXT: }

// DYNAMIC-LABEL: et.kernel @attention
// DYNAMIC: et.schedule dynamic workers(4) {
// DYNAMIC-NEXT: et.run @rmsnorm
// DYNAMIC-NEXT: et.run @qkv_proj
// DYNAMIC-NEXT: et.run @attn_split
// DYNAMIC-NEXT: et.run @merge
// DYNAMIC-NEXT: et.run @o_proj
// DYNAMIC-NEXT: }
