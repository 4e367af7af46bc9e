#include "kernels/moe_route.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "kernels/activation.h"

namespace hypic::cpu {

void moe_route_sigmoid_group(const float* logits, const float* bias, int64_t T, int64_t E, int64_t K, int64_t groups,
                             int64_t topk_group, bool mask_inf, bool renormalise, float scale, int32_t* ids,
                             float* weights) {
  const int64_t per = E / groups;
  std::vector<float> score(E), choice(E), group(groups);
  std::vector<int> order(std::max(E, groups));
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t e = 0; e < E; ++e) {
      score[e] = sigmoid(logits[t * E + e]);
      choice[e] = score[e] + bias[e];
    }
    if (groups > 1) {
      for (int64_t j = 0; j < groups; ++j) {
        float a = -INFINITY, b = -INFINITY;  // the group's two largest
        for (int64_t e = j * per; e < (j + 1) * per; ++e) {
          if (choice[e] > a) {
            b = a;
            a = choice[e];
          } else if (choice[e] > b) {
            b = choice[e];
          }
        }
        group[j] = a + b;
      }
      std::iota(order.begin(), order.begin() + groups, 0);
      std::sort(order.begin(), order.begin() + groups,
                [&](int a, int b) { return group[a] > group[b] || (group[a] == group[b] && a < b); });
      for (int64_t j = topk_group; j < groups; ++j)
        std::fill_n(choice.begin() + order[j] * per, per, mask_inf ? -INFINITY : 0.0f);
    }
    std::iota(order.begin(), order.begin() + E, 0);
    std::partial_sort(order.begin(), order.begin() + K, order.begin() + E,
                      [&](int a, int b) { return choice[a] > choice[b] || (choice[a] == choice[b] && a < b); });
    float sum = 0;
    for (int64_t j = 0; j < K; ++j) sum += score[order[j]];
    for (int64_t j = 0; j < K; ++j) {
      ids[t * K + j] = order[j];
      weights[t * K + j] = (renormalise ? score[order[j]] / sum : score[order[j]]) * scale;
    }
  }
}

}  // namespace hypic::cpu
