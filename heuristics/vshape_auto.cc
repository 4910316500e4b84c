#include "heuristics/vshape_auto.h"

#include <algorithm>
#include <array>
#include <deque>
#include <limits>
#include <numeric>
#include <string>
#include <unordered_set>
#include <vector>

#include "heuristics/fastest_order.h"

namespace optpipe {

namespace {

// A rank's row of unit slots: 'F' F of the down chunk, 'f' F of the up chunk, 'B' B of the up
// chunk (it flows down the ranks like 'F'), 'b' B of the down chunk, 'W' and 'w' their Ws,
// ' ' idle.
using Grid = std::vector<std::string>;
constexpr int kPattern = 6;
// Slot visits the search may spend: about a second on one core (all of it up to R = 16, m = 64).
constexpr int64_t kMaxSlotVisits = 150'000'000;
constexpr char kKinds[] = "FfBbWw";

int kind_index(char c) {
  switch (c) {
    case 'F': return 0;
    case 'f': return 1;
    case 'B': return 2;
    case 'b': return 3;
    case 'W': return 4;
    case 'w': return 5;
    default: return -1;
  }
}
bool is_forward(char c) { return c == 'F' || c == 'f'; }
bool is_weight(char c) { return c == 'W' || c == 'w'; }
bool flows_down(char c) { return c == 'F' || c == 'B'; }  // from rank i - 1 to rank i
bool flows_up(char c) { return c == 'f' || c == 'b'; }

// A block row: the slot of each kind within the six (-1: not placed yet).
using Block = std::array<int, kPattern>;

std::vector<int> row_peaks(const Grid& g) {
  std::vector<int> peaks;
  for (const std::string& row : g) {
    int live = 0, peak = 0;
    for (char c : row) {
      if (is_forward(c)) ++live;
      if (is_weight(c)) --live;
      peak = std::max(peak, live);
    }
    peaks.push_back(peak);
  }
  return peaks;
}
int peak_of(const Grid& g) {
  const std::vector<int> peaks = row_peaks(g);
  return peaks.empty() ? 0 : *std::max_element(peaks.begin(), peaks.end());
}

// Per rank and microbatch, the slot of each kind's op; per rank, how many of each are placed.
struct Slots {
  // Cleared for `microbatches`; the storage is kept between uses (thousands per search).
  Slots& reset(int ranks_now, int microbatches_now) {
    ranks = ranks_now;
    microbatches = microbatches_now;
    index.assign(static_cast<size_t>(ranks) * microbatches, {-1, -1, -1, -1, -1, -1});
    count.assign(ranks, {0, 0, 0, 0, 0, 0});
    return *this;
  }
  // nullptr when the count runs past the microbatches.
  std::array<int, kPattern>* at(int mb, int rank) {
    if (mb < 0 || mb >= microbatches || rank < 0 || rank >= ranks) return nullptr;
    return &index[static_cast<size_t>(mb) * ranks + rank];
  }
  int ranks = 0;
  int microbatches = 0;
  std::vector<std::array<int, kPattern>> index;
  std::vector<std::array<int, kPattern>> count;
};

class Builder {
 public:
  Builder(int ranks, int microbatches) : p_(ranks), m_(microbatches) {}

  // The rows of one building block, repeated, with the ops outside the first m microbatches
  // cleared; then squeeze, warm-up, cool-down and greedy filling. nullopt and the peak that ruled
  // it out, or the grid and its peak.
  std::optional<Grid> build(const std::vector<Block>& block, int max_mem, int* peak_out) {
    const int redundant = std::max(m_, 2 * p_);
    Grid g = repeated(block, redundant);
    if (!clear_invalid_index(g, redundant)) return fail(peak_of(g), peak_out);
    int init_peak = peak_of(g);
    *peak_out = init_peak;
    if ((m_ == redundant && init_peak > max_mem) || init_peak > 2 * p_) return std::nullopt;
    if (!squeeze(g, redundant) || !process_warm_up(g, redundant) || !squeeze(g, redundant)) {
      return std::nullopt;
    }
    int peak = peak_of(g);
    if (peak > init_peak) return std::nullopt;
    if (m_ < redundant) {
      remove_redundancy(g);
      if (m_ <= p_ && 2 * m_ <= max_mem) release_w_in_warm_up(g, std::min(2 * p_, peak));
      if (!squeeze(g, m_)) return std::nullopt;
      init_peak = peak = peak_of(g);
      *peak_out = peak;
      if (peak > max_mem) return std::nullopt;
    }
    if (!process_cool_down(g) || !reorder_greedily(g) || !relabel_w(g)) return std::nullopt;
    peak = peak_of(g);
    if (peak > init_peak) {
      *peak_out = init_peak;
      return std::nullopt;
    }
    *peak_out = peak;
    if (!correct(g)) return std::nullopt;
    return g;
  }

 private:
  static std::optional<Grid> fail(int peak, int* peak_out) {
    *peak_out = peak;
    return std::nullopt;
  }

  Grid repeated(const std::vector<Block>& block, int microbatches) const {
    Grid g;
    const int times = 4 * p_ + microbatches + 1;
    for (int i = 0; i < p_; ++i) {
      std::string one(kPattern, ' ');
      for (int k = 0; k < kPattern; ++k) {
        if (block[i][k] >= 0) one[block[i][k]] = kKinds[k];
      }
      std::string row;
      for (int t = 0; t < times; ++t) row += one;
      g.push_back(std::move(row));
    }
    return g;
  }

  static void clear_from(std::string& row, int pos, int step) {
    while (pos >= 0 && pos < static_cast<int>(row.size())) {
      row[pos] = ' ';
      pos += step * kPattern;
    }
  }

  // Each kind's first op per rank, found by a pointer that only moves forward (the authors'
  // walk), keeps m consecutive copies and clears the rest, with the W after each B.
  static bool clear_invalid_index(Grid& g, int microbatches) {
    const int p = static_cast<int>(g.size());
    int index = kPattern;
    for (char kind : std::string("FfBb")) {
      for (int n = 0; n < p; ++n) {
        const int i = flows_down(kind) ? n : p - 1 - n;
        std::string& row = g[i];
        for (int j = 0; j < kPattern; ++j) {
          if (index + kPattern >= static_cast<int>(row.size())) return false;
          if (row[index] == kind) {
            clear_from(row, index - kPattern, -1);
            clear_from(row, index + kPattern * microbatches, 1);
            ++index;
            if (kind == 'B' || kind == 'b') {
              const char weight = kind == 'B' ? 'W' : 'w';
              for (int k = 0; k < kPattern; ++k) {
                if (row[index + k] == weight) {
                  clear_from(row, index + k - kPattern, -1);
                  clear_from(row, index + k + kPattern * microbatches, 1);
                  break;
                }
              }
            }
            break;
          }
          ++index;
        }
      }
    }
    return true;
  }

  // Every op as early as its dependency on the neighbouring rank and its rank's previous op
  // allow, order kept; rows cut to the longest.
  bool squeeze(Grid& g, int microbatches) const {
    const size_t length = g[0].size();
    for (const std::string& row : g) {
      if (row.size() != length) return false;
    }
    Grid out(p_, std::string(length, ' '));
    Slots& slots = slots_.reset(p_, microbatches);
    std::vector<int> next(p_, 0);
    for (size_t j = 0; j < length; ++j) {
      for (int dir = 0; dir < 2; ++dir) {
        for (int n = 0; n < p_; ++n) {
          const int i = dir == 0 ? n : p_ - 1 - n;
          const char c = g[i][j];
          if (c == ' ') continue;
          const bool lower = c == 'F' || c == 'B' || c == 'W';
          if ((dir == 0) != lower) continue;
          const int k = kind_index(c);
          const int count = slots.count[i][k];
          auto* own = slots.at(count, i);
          if (!own) return false;
          int at = next[i];
          if (is_weight(c) || (i == 0 && flows_down(c)) || (i == p_ - 1 && flows_up(c))) {
            if (i == 0 && c == 'B' && (*own)[1] < 0) return false;
            if (i == p_ - 1 && c == 'f' && (*own)[0] < 0) return false;
            if (i == p_ - 1 && c == 'b' && (*own)[2] < 0) return false;
          } else {
            auto* input = slots.at(count, flows_down(c) ? i - 1 : i + 1);
            if (!input || (*input)[k] < 0) return false;
            at = std::max((*input)[k] + 1, next[i]);
          }
          if (at >= static_cast<int>(length)) return false;
          out[i][at] = c;
          slots.count[i][k] = count + 1;
          (*own)[k] = at;
          next[i] = at + 1;
        }
      }
    }
    const int new_length = *std::max_element(next.begin(), next.end());
    for (std::string& row : out) row.resize(new_length);
    g = std::move(out);
    return true;
  }

  // Before each rank's first 'b': 2(p - 1 - i) slots of F, then F f pairs, then B W (f or F)
  // triples, with min(i + 1, peak / 2) up-chunk Fs in the warm-up (the paper's warm-up shape).
  bool process_warm_up(Grid& g, int microbatches) const {
    const int peak = std::min(peak_of(g), 2 * p_);
    for (int i = 0; i < p_; ++i) {
      const int up_f = std::min({i + 1, peak / 2, microbatches});
      const int down_f = std::min(peak - up_f, microbatches);
      std::string& row = g[i];
      int c_f = 0, c_ff = 0, c_b = 0, c_w = 0;
      for (char& c : row) {
        if (c == 'b') break;
        if (c == 'F') ++c_f;
        else if (c == 'f') ++c_ff;
        else if (c == 'B') ++c_b;
        else if (c == 'W') ++c_w;
        else if (c != ' ') return false;
        c = ' ';
      }
      int j = i;
      int u_f = 0, u_ff = 0, u_b = 0, u_w = 0;
      auto put = [&](char c) {
        if (j >= static_cast<int>(row.size())) return false;
        row[j] = c;
        return true;
      };
      for (int t = 0; t < 2 * (p_ - 1 - i); ++t, ++j) {
        if (u_f < down_f && u_f < c_f) {
          if (!put('F')) return false;
          ++u_f;
        }
      }
      for (int t = 0; t < i + 1; ++t) {
        if (u_f < down_f && u_f < c_f) {
          if (!put('F')) return false;
          ++u_f;
        }
        ++j;
        if (u_ff < up_f && u_ff < c_ff) {
          if (!put('f')) return false;
          ++u_ff;
        }
        ++j;
      }
      while (u_f < c_f || u_ff < c_ff || u_b < c_b || u_w < c_w) {
        if (u_b < c_b) {
          if (!put('B')) return false;
          ++u_b;
        }
        ++j;
        if (u_w < c_w) {
          if (!put('W')) return false;
          ++u_w;
        }
        ++j;
        if (u_ff < c_ff) {
          if (u_ff >= u_f || !put('f')) return false;
          ++u_ff;
        } else if (u_f < c_f) {
          if (!put('F')) return false;
          ++u_f;
        }
        ++j;
      }
    }
    return true;
  }

  void remove_redundancy(Grid& g) const {
    for (std::string& row : g) {
      std::array<int, kPattern> count{};
      for (char& c : row) {
        if (c == ' ') continue;
        if (count[kind_index(c)] >= m_) {
          c = ' ';
        } else {
          ++count[kind_index(c)];
        }
      }
    }
  }

  // With few microbatches, the warm-up's Ws move to the end where memory allows.
  void release_w_in_warm_up(Grid& g, int peak_mem) const {
    const std::vector<int> peaks = row_peaks(g);
    if (peak_mem == 0) peak_mem = *std::max_element(peaks.begin(), peaks.end());
    const int min_peak = *std::min_element(peaks.begin(), peaks.end());
    const size_t length = g[0].size();
    for (int i = 0; i < p_; ++i) {
      std::string padding(std::max(0, peak_mem - min_peak), ' ');
      int moved = 0;
      for (size_t j = 0; j < length; ++j) {
        if (peaks[i] + moved >= peak_mem) break;
        if (is_weight(g[i][j])) {
          padding[moved++] = g[i][j];
          g[i][j] = ' ';
        }
      }
      g[i] += padding;
    }
  }

  // After rank 0's last 'f': (peak + 1) / 2 'b's and min(i + 1, the rest) 'B's per rank at the
  // tightest spacing, Ws after them.
  bool process_cool_down(Grid& g) const {
    const int peak = peak_of(g);
    if (peak > 2 * p_) return false;
    const int max_bb = std::min((peak + 1) / 2, m_);
    const int max_b = std::min(peak - max_bb, m_);
    int starting = -1;
    for (int i = 0; i < p_; ++i) {
      std::string& row = g[i];
      const int length = static_cast<int>(row.size());
      int c_b = 0, c_bb = 0, c_w = 0, c_ww = 0;
      int last_ff = -1;
      for (int j = length - 1; j >= 0; --j) {
        const char c = row[j];
        if (c == 'f' && last_ff == -1) last_ff = j;
        if (c == 'B' && c_b < i + 1 && c_b < max_b) {
          row[j] = ' ';
          ++c_b;
        }
        if (c == 'b' && c_bb < max_bb) {
          row[j] = ' ';
          ++c_bb;
        }
      }
      for (int j = length - 1; j >= 0; --j) {
        if (c_w >= c_b && c_ww >= c_bb && c_w + c_ww >= peak) break;
        if (row[j] == 'W') {
          row[j] = ' ';
          ++c_w;
        } else if (row[j] == 'w') {
          row[j] = ' ';
          ++c_ww;
        }
      }
      if (i == 0) starting = last_ff;
      for (int k = 0; k < c_bb; ++k) {
        const int at = starting - i + 2 * p_ - 2 * k;
        if (at < 0 || at >= length || row[at] != ' ') return false;
        row[at] = 'b';
      }
      for (int k = 0; k < c_b; ++k) {
        const int at = starting + 1 + i - 2 * k;
        if (at < 0 || at >= length) return false;
        row[at] = 'B';
      }
    }
    size_t longest = 0;
    for (std::string& row : g) {
      int c_w = 0, c_ww = 0;
      const int last_w = static_cast<int>(row.find_last_of("Ww"));  // npos: -1
      for (int j = 0; j < static_cast<int>(row.size()); ++j) {
        const char c = row[j];
        if (c == 'B') ++c_w;
        else if (c == 'b') ++c_ww;
        else if (c == 'W') --c_w;
        else if (c == 'w') --c_ww;
        if (c == ' ' && j > last_w) {
          if (c_w > 0) {
            row[j] = 'W';
            --c_w;
          } else if (c_ww > 0) {
            row[j] = 'w';
            --c_ww;
          }
        }
      }
      row.append(std::max(0, c_w), 'W');
      row.append(std::max(0, c_ww), 'w');
      longest = std::max(longest, row.size());
    }
    for (std::string& row : g) row.resize(longest, ' ');
    return squeeze(g, m_);
  }

  // Left to right, each idle slot takes the first later op of a kind not seen yet in the scan
  // that could run there (its inputs done) without raising the peak.
  bool reorder_greedily(Grid& g) const {
    const int peak = peak_of(g);
    const int length = static_cast<int>(g[0].size());
    std::vector<std::array<int, kPattern>> last(p_, {-1, -1, -1, -1, -1, -1});
    for (int i = 0; i < p_; ++i) {
      for (int j = 0; j < length; ++j) {
        if (g[i][j] != ' ') last[i][kind_index(g[i][j])] = j;
      }
    }
    std::vector<int> live(p_, 0);
    Slots& slots = slots_.reset(p_, m_);
    auto record = [&](int i, char c, int j) {
      const int k = kind_index(c);
      auto* own = slots.at(slots.count[i][k], i);
      if (!own) return false;
      (*own)[k] = j;
      ++slots.count[i][k];
      if (is_forward(c)) ++live[i];
      if (is_weight(c)) --live[i];
      return true;
    };
    for (int j = 0; j < length; ++j) {
      for (int i = 0; i < p_; ++i) {
        std::string& row = g[i];
        if (row[j] != ' ') {
          if (!record(i, row[j], j)) return false;
          continue;
        }
        std::array<bool, kPattern> available{};
        int left = 0;
        for (int k = 0; k < kPattern; ++k) {
          available[k] = last[i][k] > j;
          left += available[k];
        }
        int delta = 0, peak_delta = 0;
        for (int k = j + 1; k < length && left > 0; ++k) {
          const char c = row[k];
          if (is_forward(c)) ++delta;
          if (is_weight(c)) --delta;
          const int before = peak_delta;
          peak_delta = std::max(peak_delta, delta);
          if (c == ' ' || !available[kind_index(c)]) continue;
          available[kind_index(c)] = false;
          --left;
          if (is_forward(c) && live[i] + before >= peak) continue;
          const int count = slots.count[i][kind_index(c)];
          if (!movable(slots, i, c, count, j)) continue;
          row[j] = c;
          row[k] = ' ';
          if (!record(i, c, j)) return false;
          break;
        }
      }
    }
    return true;
  }

  bool movable(Slots& slots, int i, char c, int count, int j) const {
    auto done_before = [&](int rank, char kind) {
      auto* input = slots.at(count, rank);
      return input && (*input)[kind_index(kind)] > -1 && (*input)[kind_index(kind)] < j;
    };
    if (flows_down(c)) {
      if (i > 0) return done_before(i - 1, c);
      return c != 'B' || slots.count[i][kind_index('f')] > count;
    }
    if (flows_up(c)) {
      if (i + 1 < p_) return done_before(i + 1, c);
      return slots.count[i][kind_index(c == 'f' ? 'F' : 'B')] > count;
    }
    return slots.count[i][kind_index(c == 'W' ? 'B' : 'b')] > count;
  }

  // Ws take the kind of the B they follow, first in first out.
  bool relabel_w(Grid& g) const {
    for (std::string& row : g) {
      std::array<int, kPattern> count{};
      for (char c : row) {
        if (c != ' ') ++count[kind_index(c)];
      }
      for (int k = 0; k < kPattern; ++k) {
        if (count[k] != m_) return false;
      }
      std::deque<char> waiting;
      for (char& c : row) {
        if (c == 'B') waiting.push_back('W');
        if (c == 'b') waiting.push_back('w');
        if (is_weight(c)) {
          if (waiting.empty()) return false;
          c = waiting.front();
          waiting.pop_front();
        }
      }
      if (!waiting.empty()) return false;
    }
    return true;
  }

  // Every op present m times, each after what it depends on.
  bool correct(const Grid& g) const {
    Slots& slots = slots_.reset(p_, m_);
    for (int i = 0; i < p_; ++i) {
      for (int j = 0; j < static_cast<int>(g[i].size()); ++j) {
        const char c = g[i][j];
        if (c == ' ') continue;
        const int k = kind_index(c);
        auto* own = slots.at(slots.count[i][k], i);
        if (!own) return false;
        (*own)[k] = j;
        ++slots.count[i][k];
      }
      for (int k = 0; k < kPattern; ++k) {
        if (slots.count[i][k] != m_) return false;
      }
    }
    for (int i = 0; i < p_; ++i) {
      for (int mb = 0; mb < m_; ++mb) {
        const auto& at = *slots.at(mb, i);
        const auto before = [&](int rank, char a, char b) {
          return (*slots.at(mb, rank))[kind_index(a)] < at[kind_index(b)];
        };
        if (!before(i, 'B', 'W') || !before(i, 'b', 'w')) return false;
        if (i == 0 && p_ > 1) {
          if (!before(i, 'f', 'B')) return false;
        } else if (i == p_ - 1) {
          if (!before(i, 'F', 'f') || !before(i, 'B', 'b')) return false;
        } else {
          if (!before(i - 1, 'F', 'F') || !before(i - 1, 'B', 'B')) return false;
          if (!before(i + 1, 'f', 'f') || !before(i + 1, 'b', 'b')) return false;
        }
      }
    }
    return true;
  }

  int p_;
  int m_;
  mutable Slots slots_;  // scratch of squeeze, reorder_greedily and correct
};

// The W slots of a block row: the first free slots after each B (the up chunk's first).
Block with_weights(Block block) {
  std::array<bool, kPattern> used{};
  for (int v : block) {
    if (v >= 0) used[v] = true;
  }
  for (const auto& [b, w] : {std::pair{2, 4}, std::pair{3, 5}}) {
    for (int j = 0; j < kPattern; ++j) {
      const int pos = (block[b] + j) % kPattern;
      if (!used[pos]) {
        block[w] = pos;
        used[pos] = true;
        break;
      }
    }
  }
  return block;
}

// Rank 0's row, then each next rank's row shifted by one offset per kind (the first `len_0` ranks
// by offset_0, the rest by offset_1); nullopt where two kinds collide.
std::optional<std::vector<Block>> building_block(const Block& first,
                                                 const std::array<int, 4>& offset_0,
                                                 const std::array<int, 4>& offset_1, int len_0,
                                                 int ranks) {
  std::vector<Block> rows = {first};
  for (int i = 0; i + 1 < ranks; ++i) {
    const std::array<int, 4>& offset = i < len_0 ? offset_0 : offset_1;
    Block next = {-1, -1, -1, -1, -1, -1};
    std::array<bool, kPattern> used{};
    for (int v = 0; v < 4; ++v) {
      const int pos = (rows[i][v] + offset[v] + kPattern) % kPattern;
      if (used[pos]) return std::nullopt;
      used[pos] = true;
      next[v] = pos;
    }
    rows.push_back(with_weights(next));
  }
  return rows;
}

Order order_of(const Grid& g, int ranks) {
  Order order;
  order.ranks.resize(ranks);
  for (int r = 0; r < ranks; ++r) {
    const int down = r;
    const int up = 2 * ranks - 1 - r;
    std::array<int, kPattern> count{};
    for (char c : g[r]) {
      if (c == ' ') continue;
      const int k = kind_index(c);
      static constexpr Op kOps[] = {Op::kForward,       Op::kForward,       Op::kBackwardInput,
                                    Op::kBackwardInput, Op::kBackwardWeight, Op::kBackwardWeight};
      const bool on_up = c == 'f' || c == 'B' || c == 'W';
      order.ranks[r].push_back({kOps[k], on_up ? up : down, count[k]++});
    }
  }
  return order;
}

}  // namespace

int chunk_activations_within_budget(const Problem& problem) {
  int64_t units = std::numeric_limits<int64_t>::max();
  for (int r = 0; r < problem.ranks; ++r) {
    int64_t largest = 0;
    for (int s : problem.stages_of_rank(r)) {
      largest = std::max(largest, problem.stages[s].activation_bytes);
    }
    if (largest > 0) units = std::min(units, problem.activation_budget(r) / largest);
  }
  return static_cast<int>(std::clamp<int64_t>(units, 0, 2 * problem.ranks));
}

std::optional<Order> vshape_auto_order(const Problem& problem, int max_chunk_activations) {
  if (problem.placement != PlacementKind::kVShape || problem.chunks_per_rank != 2 ||
      problem.ranks < 2) {
    return std::nullopt;
  }
  const int p = problem.ranks;
  // Each block costs about a dozen passes over R rows of 6(4R + max(m, 2R) + 1) slots; the
  // search stops, the same way on every machine, once it has spent kMaxSlotVisits.
  const int64_t visits_per_block =
      12LL * p * kPattern * (4 * p + std::max(problem.microbatches, 2 * p) + 1);
  int64_t visits = 0;
  const int max_mem = std::min(2 * p, max_chunk_activations);
  static constexpr std::array<std::array<int, 4>, 5> kOffsets = {
      {{1, -1, 1, -1}, {2, -1, 2, -1}, {3, -1, 3, -1}, {4, -1, 4, -1}, {5, -1, 5, -1}}};
  Builder builder(p, problem.microbatches);
  FastestOrder fastest(problem, "v-auto");
  std::unordered_set<std::string> seen;
  for (int ff = 1; ff < kPattern; ++ff) {
    for (int b = 1; b < kPattern; ++b) {
      for (int bb = 1; bb < kPattern; ++bb) {
        if (ff == b || ff == bb || b == bb) continue;
        const Block first = with_weights({0, ff, b, bb, -1, -1});
        for (int i0 = 0; i0 < static_cast<int>(kOffsets.size()); ++i0) {
          for (int i1 = 0; i1 <= i0; ++i1) {
            for (int len_0 = 1; len_0 < p; ++len_0) {
              const std::optional<std::vector<Block>> block =
                  building_block(first, kOffsets[i0], kOffsets[i1], len_0, p);
              if (!block) continue;
              if ((visits += visits_per_block) > kMaxSlotVisits) return fastest.take();
              int peak = 0;
              const std::optional<Grid> grid = builder.build(*block, max_mem, &peak);
              // Longer first offsets only raise the peak (the authors stop there too).
              if (peak > 2 * p || peak > max_mem) break;
              if (!grid) continue;
              // Many blocks end in the same schedule: time each once.
              if (!seen.insert(std::accumulate(grid->begin(), grid->end(), std::string())).second) {
                continue;
              }
              fastest.offer(order_of(*grid, p));
            }
          }
        }
      }
    }
  }
  return fastest.take();
}

}  // namespace optpipe
