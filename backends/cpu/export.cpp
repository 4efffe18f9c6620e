// The CPU module's export_indices slot: the paged lists of a batch in an engine's format
// (dsv4_export_indices, include/dsv4/dsv4_paged.h). Validates the batch values first, so a
// rejected batch leaves every output untouched.
#include <new>

#include "common/paged_index.h"
#include "host.h"
#include "paged.h"

namespace {

// Dense rows: the list's own width first, -1 in any further column.
void fill_tail(const dsv4_mod_export_list& l, int64_t t, int64_t from) {
  for (int64_t c = from; c < l.width; ++c) l.indices[t * l.row_stride + c * l.col_stride] = -1;
}

void set_length(const dsv4_mod_export_list& l, int64_t t, int32_t len) {
  if (l.lengths != nullptr) l.lengths[t * l.len_stride] = len;
}

// CSR: row t is written at indptr[t] (<= t * width), full width first; the next row overwrites the
// -1 tail, so the flat array needs T * width entries at most.
void csr_row_start(const dsv4_mod_export_list& l, int64_t t, int64_t offset) {
  if (l.indptr != nullptr) l.indptr[t * l.indptr_stride] = static_cast<int32_t>(offset);
}

}  // namespace

dsv4_status cpu_export_indices(const void* /*mplan*/, const dsv4_mod_run* batch,
                               const dsv4_mod_export* exp) {
  const dsv4_host_services* host = dsv4::cpu::host();
  if (batch == nullptr || exp == nullptr || exp->plan == nullptr) {
    return dsv4::cpu::fail(DSV4_STATUS_INTERNAL, "export_indices: NULL request");
  }
  const dsv4_mod_plan& plan = *exp->plan;
  const dsv4_mod_run& run = *batch;
  dsv4_status s = cpu_paged_validate(plan, run, host);
  if (s != DSV4_STATUS_OK) return s;

  const dsv4::paged_geometry g = dsv4::paged_geometry_of(plan);
  const dsv4::paged_capacity cap = cpu_paged_capacity(run);
  const dsv4_mod_paged_batch& b = run.paged;
  const int64_t T = run.num_tokens;

  if (exp->format == DSV4_EXPORT_FLASHINFER) {
    const dsv4_mod_export_list& l = exp->combined;
    if (l.col_stride != 1) {
      return dsv4::cpu::fail(DSV4_STATUS_UNSUPPORTED,
                             "export_indices: combined_indices needs a contiguous last dimension");
    }
    const int32_t num_decodes = dsv4::paged_num_decodes(b, g.decode_threshold);
    for (int64_t t = 0; t < T; ++t) {
      const int32_t len = dsv4::paged_build_flashinfer_row(g, b, cap, t, num_decodes,
                                                           l.indices + t * l.row_stride, l.width);
      set_length(l, t, len);
    }
    return DSV4_STATUS_OK;
  }

  const bool csr = exp->format == DSV4_EXPORT_CSR;
  if (!csr && exp->format != DSV4_EXPORT_FLASHMLA) {
    return dsv4::cpu::fail(DSV4_STATUS_INVALID_ARGUMENT, "export_indices: unknown format %u",
                           exp->format);
  }
  const dsv4_mod_export_list& sw = exp->swa;
  const dsv4_mod_export_list& cm = exp->cmp;
  const bool want_cmp = cm.indices != nullptr && g.cmp_width > 0;
  int64_t swa_offset = 0;
  int64_t cmp_offset = 0;
  for (int64_t t = 0; t < T; ++t) {
    int32_t* swa_row;
    int64_t swa_stride;
    int32_t* cmp_row = nullptr;
    int64_t cmp_stride = 0;
    if (csr) {
      csr_row_start(sw, t, swa_offset);
      swa_row = sw.indices + swa_offset * sw.col_stride;
      swa_stride = sw.col_stride;
      if (want_cmp) {
        csr_row_start(cm, t, cmp_offset);
        cmp_row = cm.indices + cmp_offset * cm.col_stride;
        cmp_stride = cm.col_stride;
      }
    } else {
      swa_row = sw.indices + t * sw.row_stride;
      swa_stride = sw.col_stride;
      if (want_cmp) {
        cmp_row = cm.indices + t * cm.row_stride;
        cmp_stride = cm.col_stride;
      }
    }
    int32_t cmp_len = 0;
    const dsv4::paged_token k = dsv4::paged_locate(b, t);
    const int32_t swa_len = dsv4::paged_build_swa_row(g, b, k, cap.swa, swa_row, swa_stride);
    if (want_cmp) cmp_len = dsv4::paged_build_cmp_row(g, b, k, t, cap.cmp, cmp_row, cmp_stride);
    set_length(sw, t, swa_len);
    if (want_cmp) set_length(cm, t, cmp_len);
    if (csr) {
      swa_offset += swa_len;
      cmp_offset += cmp_len;
    } else {
      fill_tail(sw, t, g.window);
      if (want_cmp) fill_tail(cm, t, g.cmp_width);
    }
  }
  if (csr) {
    csr_row_start(sw, T, swa_offset);
    if (want_cmp) csr_row_start(cm, T, cmp_offset);
  }
  return DSV4_STATUS_OK;
}
