// The torch.export frontend: a `.pt2` archive (PyTorch 2.6's layout or the PT2 archive of 2.7
// and later) lowered to the IR from its ExportedProgram JSON alone. Every node carries its ATen
// op and the dtype and sizes of its tensors, with the batch a symbol where dynamic_shapes made it
// one, so a model is planned without reading its weights (a shape-only export of any size plans
// as fast as ONNX). Stages are generated TorchScript (pt2_stage_source.h) holding the weights the
// archive stores. Pure C++: the torch plugin is loaded only to read weights.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "compiler/model.h"
#include "frontends/pt2/exported_program.h"
#include "frontends/pt2/pt2_archive.h"

namespace rannc {

class Pt2ModelSource : public ModelSource {
 public:
  Pt2ModelSource(Pt2Archive archive, pt2::ExportedProgram program) : archive_(std::move(archive)), program_(std::move(program)) {}

  const pt2::ExportedProgram& program() const { return program_; }
  const Pt2Archive& archive() const { return archive_; }
  // The IR value of each name of the graph (placeholders, node outputs, symbolic ints).
  std::map<std::string, ir::ValueId> value_ids;
  // The buffer each buffer_mutation output is copied back into, as extra IR ops: op source_node
  // program().nodes.size() + i is mutations[i] (its value, its buffer).
  std::vector<std::pair<std::string, std::string>> mutations;

  std::optional<StageSource> stage_source(const Model& model, const emit::StageLayout& stage,
                                          int tensor_rank) const override;
  std::string reference_note() const override;

 private:
  Pt2Archive archive_;
  pt2::ExportedProgram program_;
  // The model's ops this libtorch lacks (each has a composition), found on the first stage.
  mutable std::optional<std::set<std::string>> missing_ops_;
};

Model load_pt2(const std::string& path, const LoadOptions& options);

// The exported module's state_dict: its parameters and persistent buffers, each once (a tied
// weight has two placeholders), in the program's order, each with the name the stages hold it
// under. That is its own name but for a tied weight's other names: PyTorch 2.6 gives both
// placeholders of a tied embedding and head one name ("head.weight"), while the module's
// state_dict, and so the archive's, has both ("emb.weight" too), which are found by their stored
// data (the weights are read) and follow the name they alias.
struct Pt2StateDictName {
  std::string name;     // the state_dict key
  std::string held_as;  // the weight a stage holds it as
};
std::vector<Pt2StateDictName> pt2_state_dict_names(const std::string& path);

}  // namespace rannc
