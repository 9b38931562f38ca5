package org.tpurt;

/** Status code 14 (TensorFlow's UnavailableError). */
public class UnavailableError extends OpError {
  public UnavailableError(String message) {
    super(14, message);
  }
}
