#include "formats/sha256.h"

#include <fmt/format.h>
#include <openssl/evp.h>

#include "model/errors.h"

namespace optpipe {

std::string sha256_hex(std::string_view text) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  if (EVP_Digest(text.data(), text.size(), digest, &length, EVP_sha256(), nullptr) != 1) {
    throw Error(ErrorKind::kInternal, "SHA-256 failed (OpenSSL EVP_Digest)");
  }
  std::string hex;
  for (unsigned int i = 0; i < length; ++i) hex += fmt::format("{:02x}", digest[i]);
  return hex;
}

}  // namespace optpipe
