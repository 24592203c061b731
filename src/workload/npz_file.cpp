// .npz reader on libzip (see npz_file.hpp). The archive is opened from a memory buffer; each member is read
// in 64 KiB chunks up to its declared size and the caps, so a forged size allocates nothing.
// Covered by tests/workload/megatron_loads_test.cpp and tests/fuzz (megatron_npz).
#include "src/workload/npz_file.hpp"

#include <zip.h>

#include <memory>
#include <vector>

#include "src/common/error.hpp"

namespace moesim {
namespace {

struct ArchiveCloser {
  void operator()(zip_t* z) const { zip_discard(z); }
};
struct FileCloser {
  void operator()(zip_file_t* f) const { zip_fclose(f); }
};

// A member's name as a message shows it: printable ASCII, cut to 64 characters.
std::string shown_name(const std::string& s) {
  std::string out;
  for (char c : s.substr(0, 64)) out.push_back(c >= 0x20 && c < 0x7f ? c : '?');
  return s.size() > 64 ? out + "..." : out;
}

}  // namespace

bool looks_like_zip(const std::string& bytes) { return bytes.size() >= 4 && bytes.compare(0, 4, "PK\x03\x04") == 0; }

std::map<std::string, NpyArray> parse_npz(const std::string& bytes, const std::string& name) {
  if (!looks_like_zip(bytes)) throw InputError(name + ": expected a .npz (a zip archive, magic PK\\x03\\x04), got something else");
  zip_error_t err;
  zip_error_init(&err);
  zip_source_t* src = zip_source_buffer_create(bytes.data(), bytes.size(), 0, &err);
  if (!src) throw InputError(name + ": cannot read the .npz: " + zip_error_strerror(&err));
  std::unique_ptr<zip_t, ArchiveCloser> archive(zip_open_from_source(src, ZIP_RDONLY | ZIP_CHECKCONS, &err));
  if (!archive) {
    zip_source_free(src);
    const std::string why = zip_error_strerror(&err);
    zip_error_fini(&err);
    throw InputError(name + ": expected a .npz (a zip archive of .npy members), got a broken zip: " + why);
  }
  zip_error_fini(&err);
  const zip_int64_t n = zip_get_num_entries(archive.get(), 0);
  std::map<std::string, NpyArray> out;
  uint64_t total = 0;
  std::vector<char> chunk(uint64_t{1} << 16);
  for (zip_int64_t i = 0; i < n; ++i) {
    zip_stat_t st;
    zip_stat_init(&st);
    if (zip_stat_index(archive.get(), static_cast<zip_uint64_t>(i), 0, &st) != 0 || !(st.valid & ZIP_STAT_NAME) ||
        !(st.valid & ZIP_STAT_SIZE))
      throw InputError(name + ": member " + std::to_string(i) + ": cannot read its zip entry");
    std::string member = st.name;
    if (member.size() < 4 || member.compare(member.size() - 4, 4, ".npy") != 0)
      throw InputError(name + ": " + shown_name(member) + ": expected only .npy members in a .npz");
    member.resize(member.size() - 4);
    if (out.count(member)) throw InputError(name + ": " + shown_name(member) + ": the member appears twice");
    if (st.size > kMaxNpzMemberBytes || total + st.size > kMaxNpzTotalBytes)
      throw InputError(name + ": " + shown_name(member) + ": expected at most " + std::to_string(kMaxNpzMemberBytes) +
                       " bytes per member and " + std::to_string(kMaxNpzTotalBytes) + " in all, got " +
                       std::to_string(st.size));
    std::unique_ptr<zip_file_t, FileCloser> f(zip_fopen_index(archive.get(), static_cast<zip_uint64_t>(i), 0));
    if (!f)
      throw InputError(name + ": " + shown_name(member) + ": cannot open the member (" +
                       zip_strerror(archive.get()) + ")");
    std::string data;
    while (data.size() < st.size) {
      const zip_uint64_t want = std::min<zip_uint64_t>(chunk.size(), st.size - data.size());
      const zip_int64_t got = zip_fread(f.get(), chunk.data(), want);
      if (got < 0)
        throw InputError(name + ": " + shown_name(member) + ": cannot read the member (" + zip_file_strerror(f.get()) + ")");
      if (got == 0) break;
      data.append(chunk.data(), static_cast<size_t>(got));
    }
    if (data.size() != st.size)
      throw InputError(name + ": " + shown_name(member) + ": truncated member: expected " + std::to_string(st.size) +
                       " bytes, got " + std::to_string(data.size()));
    total += st.size;
    out.emplace(member, parse_npy_array(data, name + ": " + shown_name(member)));
  }
  return out;
}

std::string encode_npz(const std::map<std::string, std::string>& npy_members) {
  zip_error_t err;
  zip_error_init(&err);
  zip_source_t* buf = zip_source_buffer_create(nullptr, 0, 0, &err);
  MOESIM_REQUIRE(buf, "encode_npz: cannot create a buffer");
  zip_source_keep(buf);
  zip_t* z = zip_open_from_source(buf, ZIP_TRUNCATE, &err);
  MOESIM_REQUIRE(z, "encode_npz: cannot open the archive");
  for (const auto& [member, npy] : npy_members) {
    zip_source_t* s = zip_source_buffer(z, npy.data(), npy.size(), 0);
    const zip_int64_t idx = zip_file_add(z, (member + ".npy").c_str(), s, ZIP_FL_OVERWRITE);
    MOESIM_REQUIRE(idx >= 0, "encode_npz: cannot add " << member);
    zip_set_file_compression(z, static_cast<zip_uint64_t>(idx), ZIP_CM_STORE, 0);
  }
  MOESIM_REQUIRE(zip_close(z) == 0, "encode_npz: cannot write the archive");
  std::string out;
  zip_stat_t st;
  zip_source_stat(buf, &st);
  MOESIM_REQUIRE(zip_source_open(buf) == 0, "encode_npz: cannot reopen the buffer");
  out.resize(st.size);
  if (st.size) zip_source_read(buf, &out[0], st.size);
  zip_source_close(buf);
  zip_source_free(buf);
  zip_error_fini(&err);
  return out;
}

}  // namespace moesim
