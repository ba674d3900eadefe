// RUN: et-opt %s --et-verify-event-graph=emit-counts --verify-diagnostics --verify-roundtrip | FileCheck %s

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
  et.task @rmsnorm tiles(%t) in (%c1) {
    et.event.signal %normed[] : !et.event<>
  }
  // 32 column tiles; 4 of them belong to each KV head.
  et.task @qkv_proj tiles(%n) in (%c32) {
    et.event.wait %normed[] : !et.event<>
    %head = affine.apply affine_map<(d0) -> (d0 floordiv 4)>(%n)
    et.event.signal %qkv[%head] : !et.event<8>
  }
  // CHECK: et.task @attn_split tiles
  et.task @attn_split tiles(%head, %s) in (%c8, %splits) {
    et.event.wait %qkv[%head] : !et.event<8>
    et.event.signal %partial[%head] : !et.event<8>
  }
  et.task @merge tiles(%head) in (%c8) {
    et.event.wait %partial[%head] : !et.event<8>
    et.event.signal %merged[] : !et.event<>
  }
  et.task @o_proj tiles(%n) in (%c16) {
    et.event.wait %merged[] : !et.event<>
  }
}
