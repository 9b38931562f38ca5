// A checkpoint's manifest.json (docs/CHECKPOINT.md): what the checkpoint holds and
// where, with the size and SHA-256 of every file. Written last, by task 0.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tpurt/common.h"

namespace tpurt {
namespace checkpoint {

struct FileEntry {
  std::string path;  // a plain file name inside the checkpoint's directory
  uint64_t bytes = 0;
  std::string sha256;  // 64 lowercase hex digits
};

// One task's rows of a table: the shards of its cores, [first_shard, + num_shards),
// each shard's variables in turn, each variable's rows in shard-row order.
struct ShardFile {
  int task = 0;
  int64_t first_shard = 0, num_shards = 0;
  FileEntry file;
};

struct TableEntry {
  std::string name;
  int64_t vocabulary_size = 0;
  int32_t dimension = 0;
  std::string optimizer;               // Optimizer::kind_name()
  std::vector<std::string> variables;  // "parameters", then the slots
  std::string dtype = "float32";
  std::vector<ShardFile> shards;  // by task
};

struct TensorEntry {
  std::string name;
  tpu_dtype dtype = TPU_FLOAT;
  std::vector<int64_t> shape;
  uint64_t offset = 0, bytes = 0;  // in the tensors' file
};

struct Manifest {
  int64_t step = 0;
  int num_tasks = 1, cores_per_task = 1;
  bool mod = false;  // the tables' sharding: MOD, else DIV
  std::vector<TableEntry> tables;
  std::vector<TensorEntry> tensors;
  FileEntry tensor_file;
};

constexpr const char* kManifestName = "manifest.json";

std::string manifest_to_json(const Manifest& m);
// Parses and checks a manifest (sizes consistent with the shapes, files named plainly):
// TPU_DATA_LOSS naming `where` and the field otherwise.
Manifest parse_manifest(const std::string& text, const std::string& where);

// The bytes of one task's shard file of a table (the layout above).
uint64_t shard_file_bytes(const TableEntry& t, int64_t shards, bool mod, int64_t first_shard,
                          int64_t num_shards);

}  // namespace checkpoint
}  // namespace tpurt
