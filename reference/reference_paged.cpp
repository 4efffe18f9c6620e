// Independent builder of paged-mode index lists (spec section 4); see reference_paged.h.
#include "reference_paged.h"

#include <algorithm>
#include <sstream>
#include <stdexcept>

namespace dsv4test {

namespace {

[[noreturn]] void reject(const std::string& what) { throw std::invalid_argument(what); }

int64_t bt_at(const std::vector<int32_t>& bt, int64_t cols, int64_t r, int64_t col) {
  return bt[static_cast<size_t>(r * cols + col)];
}

}  // namespace

int64_t ref_c128a_width(int64_t max_model_len) {
  const int64_t entries = (max_model_len + 127) / 128;
  return (entries + 127) / 128 * 128;
}

int64_t ref_cmp_width(const RefPagedConfig& c) {
  if (c.compress_ratio == 4) return c.index_topk;
  if (c.compress_ratio == 128) return ref_c128a_width(c.max_model_len);
  return 0;
}

int32_t ref_swa_slot(const RefPagedConfig& c, const int32_t* bt_row, int64_t bt_cols, int64_t pos) {
  const int64_t col = pos / c.swa_block_size;
  if (pos < 0 || col >= bt_cols) return -1;
  return static_cast<int32_t>(bt_row[col] * c.swa_block_size + pos % c.swa_block_size);
}

int32_t ref_cmp_slot(const RefPagedConfig& c, const int32_t* bt_row, int64_t bt_cols,
                     int64_t entry) {
  const int64_t col = entry / c.cmp_block_size;
  if (entry < 0 || col >= bt_cols) return -1;
  return static_cast<int32_t>(bt_row[col] * c.cmp_block_size + entry % c.cmp_block_size);
}

RefPagedLists ref_build_paged_lists(const RefPagedConfig& c, const RefPagedBatch& b) {
  const int64_t T = b.num_tokens;
  if (b.query_start_loc.empty()) reject("query_start_loc is empty");
  const int64_t R = static_cast<int64_t>(b.query_start_loc.size()) - 1;
  if (static_cast<int64_t>(b.seq_lens.size()) != R) reject("seq_lens size != num requests");
  if (static_cast<int64_t>(b.slot_mapping.size()) != T) reject("slot_mapping size != T");
  if (b.query_start_loc[0] != 0) reject("query_start_loc[0] != 0");
  for (int64_t r = 0; r < R; ++r) {
    if (b.query_start_loc[r + 1] < b.query_start_loc[r]) reject("query_start_loc not monotone");
  }
  if (b.query_start_loc[R] > T) reject("query_start_loc[R] > T");
  for (int64_t r = 0; r < R; ++r) {
    if (b.seq_lens[r] < b.query_start_loc[r + 1] - b.query_start_loc[r]) {
      reject("seq_lens < query_len");
    }
  }

  RefPagedLists out;
  out.swa_width = c.window;
  out.cmp_width = ref_cmp_width(c);
  out.swa.resize(T);
  out.cmp.resize(T);
  out.token_req.assign(T, -1);
  out.token_pos.assign(T, -1);
  out.is_padding.assign(T, true);

  // Decodes first: the split point is the first request with query_len > threshold.
  out.num_decodes = R;
  for (int64_t r = 0; r < R; ++r) {
    if (b.query_start_loc[r + 1] - b.query_start_loc[r] > c.decode_threshold) {
      out.num_decodes = r;
      break;
    }
  }
  out.num_decode_tokens = b.query_start_loc[out.num_decodes];

  for (int64_t r = 0; r < R; ++r) {
    const int64_t first = b.query_start_loc[r];
    const int64_t qlen = b.query_start_loc[r + 1] - first;
    for (int64_t i = 0; i < qlen; ++i) {
      const int64_t t = first + i;
      out.token_req[t] = r;
      out.token_pos[t] = b.seq_lens[r] - qlen + i;
      out.is_padding[t] = b.slot_mapping[t] < 0;
    }
  }

  for (int64_t t = 0; t < T; ++t) {
    RefList& swa = out.swa[t];
    RefList& cmp = out.cmp[t];
    swa.idx.assign(out.swa_width, -1);
    cmp.idx.assign(out.cmp_width, -1);
    swa.length = 0;
    cmp.length = 0;
    if (out.is_padding[t]) continue;
    const int64_t r = out.token_req[t];
    const int64_t p = out.token_pos[t];

    // Spec 4.2: ascending window ending at the token itself.
    const int64_t start = std::max<int64_t>(0, p - c.window + 1);
    swa.length = p - start + 1;
    for (int64_t j = 0; j < swa.length; ++j) {
      const int64_t pos = start + j;
      const int64_t col = pos / c.swa_block_size;
      if (col >= b.swa_bt_cols) reject("SWA block-table column beyond its width");
      const int64_t block = bt_at(b.swa_block_table, b.swa_bt_cols, r, col);
      if (block < 0) reject("SWA block-table entry negative");
      swa.idx[j] = static_cast<int32_t>(block * c.swa_block_size + pos % c.swa_block_size);
    }

    const int64_t visible = c.compress_ratio > 1 ? (p + 1) / c.compress_ratio : 0;
    if (c.compress_ratio == 4) {
      // Spec 4.4: request-local -> global, -1 kept, length = number of non-negative entries.
      int64_t count = 0;
      for (int64_t i = 0; i < c.index_topk; ++i) {
        const int64_t l = b.topk_indices[static_cast<size_t>(t * c.index_topk + i)];
        if (l < 0) continue;
        if (l >= visible) reject("top-k entry >= visible compressed count");
        const int64_t col = l / c.cmp_block_size;
        if (col >= b.cmp_bt_cols) reject("compressed block-table column beyond its width");
        const int64_t block = bt_at(b.cmp_block_table, b.cmp_bt_cols, r, col);
        if (block < 0) reject("compressed block-table entry negative");
        cmp.idx[i] = static_cast<int32_t>(block * c.cmp_block_size + l % c.cmp_block_size);
        ++count;
      }
      cmp.length = count;
    } else if (c.compress_ratio == 128) {
      // Spec 4.5: every completed entry, capped at the width.
      const int64_t n = std::min(visible, out.cmp_width);
      for (int64_t i = 0; i < n; ++i) {
        const int64_t col = i / c.cmp_block_size;
        if (col >= b.cmp_bt_cols) reject("compressed block-table column beyond its width");
        const int64_t block = bt_at(b.cmp_block_table, b.cmp_bt_cols, r, col);
        if (block < 0) reject("compressed block-table entry negative");
        cmp.idx[i] = static_cast<int32_t>(block * c.cmp_block_size + i % c.cmp_block_size);
      }
      cmp.length = n;
    }
  }
  return out;
}

RefDense ref_to_dense(const std::vector<RefList>& lists, int64_t width) {
  RefDense d;
  d.width = width;
  d.indices.assign(lists.size() * static_cast<size_t>(width), -1);
  d.lens.assign(lists.size(), 0);
  for (size_t t = 0; t < lists.size(); ++t) {
    for (int64_t i = 0; i < width && i < static_cast<int64_t>(lists[t].idx.size()); ++i) {
      d.indices[t * width + i] = lists[t].idx[i];
    }
    d.lens[t] = static_cast<int32_t>(lists[t].length);
  }
  return d;
}

RefCsr ref_to_csr(const std::vector<RefList>& lists) {
  RefCsr csr;
  csr.indptr.push_back(0);
  for (const RefList& l : lists) {
    for (int64_t i = 0; i < l.length; ++i) csr.indices.push_back(l.idx[i]);
    csr.indptr.push_back(static_cast<int32_t>(csr.indices.size()));
  }
  return csr;
}

RefDense ref_flashinfer_matrix(const RefPagedConfig& c, const RefPagedBatch& b,
                               const RefPagedLists& lists) {
  const int64_t W = lists.swa_width;
  const int64_t pt = (lists.cmp_width + 3) / 4 * 4;
  const int64_t T = b.num_tokens;
  RefDense d;
  d.width = W + pt;
  d.indices.assign(static_cast<size_t>(T * d.width), -1);
  d.lens.assign(T, static_cast<int32_t>(W));
  for (int64_t t = 0; t < T; ++t) {
    if (lists.is_padding[t]) continue;
    int32_t* row = &d.indices[static_cast<size_t>(t * d.width)];
    for (int64_t j = 0; j < lists.swa[t].length; ++j) row[j] = lists.swa[t].idx[j];
    const bool decode = lists.token_req[t] < lists.num_decodes;
    int64_t cmp_len;
    int64_t cols;  // compressed columns copied
    if (decode || c.compress_ratio == 128) {
      cmp_len = lists.cmp[t].length;
      cols = lists.cmp_width;
    } else {
      const int64_t p = lists.token_pos[t];
      const int64_t visible = c.compress_ratio > 1 ? (p + 1) / c.compress_ratio : 0;
      cmp_len = std::min(visible, lists.cmp_width);
      cols = cmp_len;
    }
    for (int64_t i = 0; i < cols; ++i) row[W + i] = lists.cmp[t].idx[i];
    d.lens[t] = static_cast<int32_t>(W + cmp_len);
  }
  return d;
}

std::string ref_describe_batch(const RefPagedBatch& b) {
  std::ostringstream os;
  const size_t R = b.seq_lens.size();
  os << "T=" << b.num_tokens << " R=" << R << " [";
  for (size_t r = 0; r < R && r + 1 < b.query_start_loc.size(); ++r) {
    os << (r ? " " : "") << "(q" << b.query_start_loc[r + 1] - b.query_start_loc[r] << ",s"
       << b.seq_lens[r] << ")";
  }
  os << "]";
  return os.str();
}

}  // namespace dsv4test
