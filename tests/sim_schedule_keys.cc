#include <algorithm>
#include <array>

#include "dmidx/keys.h"
#include "testing/model.h"
#include "tests/sim_schedule.h"

namespace dmidx::testing {

KeyCodec KeyCodec::Plain(uint64_t count) {
  KeyCodec codec;
  codec.count_ = count;
  return codec;
}

KeyCodec KeyCodec::Spread(std::mt19937_64& rng) {
  KeyCodec codec;
  std::array<uint32_t, 8> places = {0, 1, 2, 3, 4, 5, 6, 7};
  std::shuffle(places.begin(), places.end(), rng);
  const size_t digits = 3 + rng() % 2;
  std::sort(places.begin(), places.begin() + digits);
  std::vector<uint32_t> bases;
  for (size_t d = 0; d < digits; ++d)
    bases.push_back(2 + rng() % 2);
  auto product = [&bases] {
    uint64_t count = 1;
    for (uint32_t base : bases)
      count *= base;
    return count;
  };
  while (product() > 36)
    *std::max_element(bases.begin(), bases.end()) = 2;
  codec.count_ = product();
  for (int i = 0; i < 8; ++i)
    codec.fixed_.push_back(static_cast<char>(rng() % 256));
  for (size_t d = 0; d < digits; ++d) {
    Digit digit{places[d], {}};
    const uint32_t first = rng() % 64, step = 1 + rng() % 80;
    for (uint32_t v = 0; v < bases[d]; ++v)
      digit.values.push_back(static_cast<uint8_t>(first + v * step));
    codec.digits_.push_back(std::move(digit));
  }
  return codec;
}

std::string KeyCodec::Encode(uint64_t id) const {
  if (digits_.empty()) return Key(id);
  std::string key = fixed_;
  for (size_t d = digits_.size(); d-- > 0;) {
    const Digit& digit = digits_[d];
    key[digit.place] = static_cast<char>(digit.values[id % digit.values.size()]);
    id /= digit.values.size();
  }
  return key;
}

std::optional<uint64_t> KeyCodec::Decode(const std::string& key) const {
  if (key.size() != 8) return std::nullopt;
  if (digits_.empty()) return DecodeUint64Key(key);
  uint64_t id = 0;
  size_t d = 0;
  for (uint32_t place = 0; place < 8; ++place) {
    const auto byte = static_cast<uint8_t>(key[place]);
    if (d < digits_.size() && digits_[d].place == place) {
      const std::vector<uint8_t>& values = digits_[d++].values;
      const auto at = std::find(values.begin(), values.end(), byte);
      if (at == values.end()) return std::nullopt;
      id = id * values.size() + static_cast<uint64_t>(at - values.begin());
    } else if (byte != static_cast<uint8_t>(fixed_[place])) {
      return std::nullopt;
    }
  }
  return id;
}

uint64_t KeyCodec::Sibling(uint64_t id, std::mt19937_64& rng) const {
  if (digits_.empty()) return id;
  const uint64_t base = digits_.back().values.size();
  const uint64_t digit = id % base;
  return id - digit + (digit + 1 + rng() % (base - 1)) % base;
}

std::string KeyCodec::ToString() const {
  if (digits_.empty()) return std::to_string(count_) + " keys";
  std::string text = std::to_string(count_) + " keys ";
  size_t d = 0;
  for (uint32_t place = 0; place < 8; ++place) {
    if (place > 0) text += ":";
    if (d < digits_.size() && digits_[d].place == place) {
      // (Built by appending: GCC 12's -Wrestrict misfires on "," + string.)
      text.append("{");
      for (uint8_t value : digits_[d].values) {
        if (value != digits_[d].values.front()) text.append(",");
        text.append(Hex(std::string(1, static_cast<char>(value))));
      }
      text.append("}");
      ++d;
    } else {
      text += Hex(fixed_.substr(place, 1));
    }
  }
  return text;
}

}  // namespace dmidx::testing
