// Where rank 0's store listens and where the ranks reach it: the loopback address when every rank
// is on this machine, the address MASTER_ADDR names when they are not, every interface only when
// the user asks (ACCEL_LISTEN_ADDRESS=0.0.0.0 or ::). Pure logic.
#pragma once

#include <string>

namespace accel::store {

struct StoreEndpoint {
  std::string listen;   // the address rank 0's store binds
  std::string connect;  // the address the other ranks connect to
  std::string note;     // why it listens wider than asked (empty when it does not)
};

// `master_addr` as MASTER_ADDR gave it (a name or a number); `all_local` when the engine says
// every rank is on this machine; `listen_override` is ACCEL_LISTEN_ADDRESS ("" when unset).
StoreEndpoint store_endpoint(const std::string& master_addr, bool all_local,
                             const std::string& listen_override);

// The address a client on this machine uses to reach a server listening on `listen` ("0.0.0.0"
// and "::" become the loopback address of their family).
std::string local_connect_address(const std::string& listen);

bool is_loopback_address(const std::string& numeric);
bool is_wildcard_address(const std::string& numeric);

// The first address `name` resolves to, numeric ("" when it does not resolve).
std::string resolve_numeric(const std::string& name);

}  // namespace accel::store
