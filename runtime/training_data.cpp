#include "runtime/training_data.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>

#include <algorithm>

#include "torch_side/torch_dtype.h"
#include "support/error.h"

namespace rannc::runtime {
namespace {

std::string dims_text(const std::vector<std::int64_t>& dims) {
  std::string text = "(";
  for (std::size_t i = 0; i < dims.size(); ++i) text += (i ? ", " : "") + std::to_string(dims[i]);
  return text + (dims.size() == 1 ? ",)" : ")");
}

c10::ScalarType scalar_type(ir::DType dtype, const std::string& name) {
  auto type = ir::to_scalar_type(dtype);
  if (!type) throw InputError("'" + name + "' has dtype " + std::string(ir::dtype_name(dtype)) + ", which libtorch lacks");
  return *type;
}

// Samples the model reads as integers must come as integers: a float file would be truncated.
void check_file(const NpyFile& file, const SampleSpec& spec) {
  std::vector<std::int64_t> sample(file.shape().begin() + 1, file.shape().end());
  if (sample != spec.sample_shape) {
    throw InputError(file.path() + ": shape " + dims_text(file.shape()) + " does not hold samples of shape " +
                     dims_text(spec.sample_shape) + " after dim 0");
  }
  if (ir::is_floating_point(file.dtype()) != ir::is_floating_point(spec.dtype)) {
    throw InputError(file.path() + ": dtype " + std::string(ir::dtype_name(file.dtype())) + " cannot stand for '" +
                     spec.name + "', which is " + std::string(ir::dtype_name(spec.dtype)));
  }
}

// Runs of consecutive values in `rows`, as (first, count).
std::vector<std::pair<std::int64_t, std::int64_t>> runs_of(const std::vector<std::int64_t>& rows) {
  std::vector<std::pair<std::int64_t, std::int64_t>> runs;
  for (auto row : rows) {
    if (!runs.empty() && runs.back().first + runs.back().second == row) ++runs.back().second;
    else runs.emplace_back(row, 1);
  }
  return runs;
}

}  // namespace

TrainingData::TrainingData(const RunOptions& options, std::int64_t global_batch, std::vector<SampleSpec> arrays,
                           std::vector<std::string> needed, std::vector<SampleRange> microbatch_rows)
    : options_(options),
      global_batch_(global_batch),
      arrays_(std::move(arrays)),
      needed_(std::move(needed)),
      microbatch_rows_(std::move(microbatch_rows)) {
  for (const auto& spec : arrays_) scalar_type(spec.dtype, spec.name);
  if (options_.data_dir.empty()) return;
  for (const auto& spec : arrays_) {
    auto file = std::make_unique<NpyFile>(options_.data_dir + "/" + spec.name + ".npy");
    check_file(*file, spec);
    const auto& first = files_.empty() ? *file : *files_.begin()->second;
    if (file->rows() != first.rows()) {
      throw InputError(file->path() + ": " + std::to_string(file->rows()) + " rows, but " + first.path() + " has " +
                       std::to_string(first.rows()) + " (every file holds one row per sample)");
    }
    files_[spec.name] = std::move(file);
  }
  order_ = std::make_unique<DataOrder>(files_.begin()->second->rows(), global_batch_, options_.shuffle, options_.seed);
}

TrainingData::~TrainingData() = default;

void TrainingData::load_step(std::int64_t step) {
  for (std::size_t i = 0; i < arrays_.size(); ++i) {
    if (std::find(needed_.begin(), needed_.end(), arrays_[i].name) == needed_.end()) continue;
    auto& microbatches = batches_[arrays_[i].name];
    microbatches.clear();
    at::Tensor drawn = options_.data_dir.empty() ? draw(i, step) : at::Tensor();
    for (const auto& range : microbatch_rows_) {
      microbatches.push_back(drawn.defined() ? drawn.narrow(arrays_[i].batch_dim, range.begin, range.length)
                                             : read(i, step, range));
    }
  }
}

std::int64_t TrainingData::bytes_read() const {
  std::int64_t bytes = 0;
  for (const auto& [name, file] : files_) bytes += file->bytes_read();
  return bytes;
}

// The range's samples, from wherever the data order puts them (runs of consecutive rows read at once).
at::Tensor TrainingData::read(std::size_t array, std::int64_t step, const SampleRange& range) {
  const auto& spec = arrays_[array];
  auto& file = *files_.at(spec.name);
  std::vector<std::int64_t> rows;
  for (std::int64_t sample = range.begin; sample < range.begin + range.length; ++sample)
    rows.push_back(order_->row(step, sample));
  std::vector<std::int64_t> shape{range.length};
  shape.insert(shape.end(), spec.sample_shape.begin(), spec.sample_shape.end());
  // Read straight into the tensor, converted only where the file's dtype is not the model's.
  auto tensor = at::empty(shape, at::TensorOptions().dtype(scalar_type(file.dtype(), spec.name)));
  auto* at_row = static_cast<char*>(tensor.data_ptr());
  for (auto [first, count] : runs_of(rows)) {
    file.read_rows_into(first, count, at_row);
    at_row += count * file.row_bytes();
  }
  tensor = tensor.to(scalar_type(spec.dtype, spec.name));
  return tensor.movedim(0, spec.batch_dim).contiguous();
}

// Every rank that needs an array draws the same values: the generator's seed depends only on
// --seed, the step and the array.
at::Tensor TrainingData::draw(std::size_t array, std::int64_t step) const {
  const auto& spec = arrays_[array];
  auto generator = at::detail::createCPUGenerator(options_.seed * 1000003u + static_cast<std::uint64_t>(step) * 1009u + array);
  std::vector<std::int64_t> shape = spec.sample_shape;
  shape.insert(shape.begin() + spec.batch_dim, global_batch_);
  return ir::random_tensor(scalar_type(spec.dtype, spec.name), shape, generator, spec.index_bound);
}

}  // namespace rannc::runtime
