// SLURM's compressed notations: host lists ("node[001-003,7],gpu1") and task counts per node
// ("2(x3),1"). Pure C++.
#pragma once

#include <string>
#include <vector>

namespace accel::cluster {

// Every host of a SLURM host list, in order: "node[001-003,7],login" -> node001, node002,
// node003, node7, login. Bracket groups may repeat in one name ("r[1-2]n[1-2]" -> r1n1, r1n2,
// r2n1, r2n2). Throws accel::Error(config) saying where the text stops making sense, and refuses
// lists of more than `max_hosts` hosts.
std::vector<std::string> expand_hostlist(const std::string& text, size_t max_hosts = 1 << 20);

// Tasks per node from SLURM's "2(x3),1" notation -> 2, 2, 2, 1. Throws accel::Error(config).
std::vector<int> expand_task_counts(const std::string& text, size_t max_nodes = 1 << 20);

}  // namespace accel::cluster
