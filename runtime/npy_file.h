// Reads NumPy .npy files (format versions 1-3, C order, little-endian) row by row along dim 0,
// memory-mapped, so a data set larger than memory is read one step's rows at a time, in any
// order. No Debian package reads .npy from C++ without a large dependency, and the format is a
// short header before raw data.
#pragma once

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "ir/dtype.h"

namespace rannc::runtime {

class NpyFile {
 public:
  // Opens and checks the header; throws InputError naming the file and the problem.
  explicit NpyFile(const std::string& path);
  ~NpyFile();
  NpyFile(const NpyFile&) = delete;
  NpyFile& operator=(const NpyFile&) = delete;

  const std::string& path() const { return path_; }
  ir::DType dtype() const { return dtype_; }
  const std::vector<std::int64_t>& shape() const { return shape_; }
  std::int64_t rows() const { return shape_.empty() ? 0 : shape_.front(); }
  std::int64_t row_bytes() const { return row_bytes_; }

  // The raw bytes of rows [first, first + count).
  std::vector<char> read_rows(std::int64_t first, std::int64_t count);
  // The same into `destination`, which holds count * row_bytes() bytes: no copy in between.
  void read_rows_into(std::int64_t first, std::int64_t count, void* destination);
  std::int64_t bytes_read() const { return bytes_read_; }  // by read_rows and read_rows_into so far

 private:
  void parse_header(const std::string& header);
  void map_data();

  std::string path_;
  std::ifstream stream_;
  ir::DType dtype_ = ir::DType::kUnknown;
  std::vector<std::int64_t> shape_;
  std::int64_t data_offset_ = 0, row_bytes_ = 0;
  void* mapping_ = nullptr;
  std::size_t mapping_bytes_ = 0;
  std::int64_t bytes_read_ = 0;
};

}  // namespace rannc::runtime
