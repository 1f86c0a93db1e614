package io.leasebeat;

import java.util.Objects;

/**
 * One HTTP response header as it arrived. Names compare case-insensitively in the core; both
 * travel to it as UTF-8 bytes.
 *
 * @param name the header name
 * @param value the header value
 */
public record Header(String name, String value) {
  /**
   * Checks for nulls.
   *
   * @param name see {@link #name()}
   * @param value see {@link #value()}
   */
  public Header {
    Objects.requireNonNull(name, "name");
    Objects.requireNonNull(value, "value");
  }
}
