// Independent float64-side builder of DeepSeek-V4 paged-mode index lists (spec section 4), written
// from the spec alone: it shares NO code with backends/ (the library's builders live in
// backends/common/paged_index.h), so a bug there cannot hide in both. Plain std::vector inputs;
// no GTest, no libdsv4 dependency.
//
// Semantics (the same the library documents in docs/paged-mode.md):
//  * request r owns tokens [query_start_loc[r], query_start_loc[r+1]); query_len = the difference;
//    token i of r sits at position p = seq_lens[r] - query_len + i.
//  * decodes come first: the first request with query_len > decode_threshold and every request
//    after it are prefills.
//  * a token is padding when slot_mapping[t] < 0 or when t >= query_start_loc[R]: all its lists
//    are -1 with length 0 (zero output, lse +inf).
//  * SWA list (width W): positions max(0, p-W+1) .. p ascending, slot = swa_bt[r][q / Bs] * Bs +
//    q % Bs, -1 beyond the length min(p+1, W).
//  * C4A list (width K): g[i] = local[t][i] >= 0 ? cmp_bt[r][l / Bc] * Bc + l % Bc : -1;
//    length = count(local[t][i] >= 0).
//  * C128A list (width Wc = round_up(ceil(max_model_len/128), 128)): entries 0 .. n-1 with
//    n = min((p+1) / 128, Wc), slot = cmp_bt[r][i / Bc] * Bc + i % Bc; length n.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "reference.h"

namespace dsv4test {

// Static layer configuration (the paged-mode fields of dsv4_plan_options).
struct RefPagedConfig {
  int64_t compress_ratio = 1;     // <= 1 SWA-only, 4 C4A, 128 C128A
  int64_t window = 128;           // W
  int64_t swa_block_size = 64;    // SWA tokens per block (Bs)
  int64_t cmp_block_size = 64;    // compressed ENTRIES per block (Bc = logical tokens / ratio)
  int64_t index_topk = 512;       // C4A K
  int64_t decode_threshold = 1;   // query_len <= this (before the first prefill) = decode
  int64_t max_model_len = 65536;  // C128A width
};

// One step's batch description, as an engine holds it (all host vectors, int32 like vLLM).
struct RefPagedBatch {
  int64_t num_tokens = 0;                // T (may exceed query_start_loc[R]: padding rows)
  std::vector<int32_t> query_start_loc;  // [R+1]
  std::vector<int32_t> seq_lens;         // [R]
  std::vector<int32_t> swa_block_table;  // [R][swa_bt_cols]
  int64_t swa_bt_cols = 0;
  std::vector<int32_t> cmp_block_table;  // [R][cmp_bt_cols] (compressed layers)
  int64_t cmp_bt_cols = 0;
  std::vector<int32_t> slot_mapping;  // [T]
  std::vector<int32_t> topk_indices;  // [T][index_topk] request-local (C4A only)
};

// Per-token lists built from a batch.
struct RefPagedLists {
  int64_t swa_width = 0;    // W
  int64_t cmp_width = 0;    // 0 SWA-only, K for C4A, Wc for C128A
  int64_t num_decodes = 0;  // decode requests (the first num_decodes requests)
  int64_t num_decode_tokens = 0;
  std::vector<RefList> swa;        // [T], idx has swa_width entries, length set
  std::vector<RefList> cmp;        // [T], idx has cmp_width entries, length set
  std::vector<int64_t> token_req;  // [T], -1 for tokens outside every request
  std::vector<int64_t> token_pos;  // [T], -1 for tokens outside every request
  std::vector<bool> is_padding;    // [T]
};

// Width of the compressed list for this configuration (0, K or Wc).
int64_t ref_cmp_width(const RefPagedConfig& c);
// C128A width round_up(ceil(L / 128), 128).
int64_t ref_c128a_width(int64_t max_model_len);

// Builds every token's lists. Throws std::invalid_argument with a message when the batch is
// malformed (seq_len < query_len, non-monotone query_start_loc, block index or top-k entry out of
// range): the same inputs the library must reject.
RefPagedLists ref_build_paged_lists(const RefPagedConfig& c, const RefPagedBatch& b);

// Export formats built from the lists (spec 4.8 / 4.9).
struct RefDense {  // FlashMLA: [T][width] + lens [T]
  std::vector<int32_t> indices;
  std::vector<int32_t> lens;
  int64_t width = 0;
};
struct RefCsr {  // ROCm: indptr [T+1] + flat indices (first len entries)
  std::vector<int32_t> indptr;
  std::vector<int32_t> indices;
};
RefDense ref_to_dense(const std::vector<RefList>& lists, int64_t width);
RefCsr ref_to_csr(const std::vector<RefList>& lists);
// FlashInfer TRTLLM-gen combined matrix [T][W + PT], PT = round_up(cmp_width, 4); lens: decode
// W + cmp_len, prefill W + min((p+1)/ratio, cmp_width) (compressed columns of prefill tokens beyond
// that count are -1); padding tokens: all -1, lens W (FlashInfer requires lens >= 128).
RefDense ref_flashinfer_matrix(const RefPagedConfig& c, const RefPagedBatch& b,
                               const RefPagedLists& lists);

// Slot an engine writes for position `pos` of a request (SWA insert), and for compressed entry c
// (written by the token at position c*ratio + ratio - 1). Return -1 when the block-table row is too
// short. Useful to fill caches "as an engine does" through dsv4_kv_write.
int32_t ref_swa_slot(const RefPagedConfig& c, const int32_t* bt_row, int64_t bt_cols, int64_t pos);
int32_t ref_cmp_slot(const RefPagedConfig& c, const int32_t* bt_row, int64_t bt_cols,
                     int64_t entry);

// Human-readable one-line description of a batch (request count, query/seq lens) for failures.
std::string ref_describe_batch(const RefPagedBatch& b);

}  // namespace dsv4test
