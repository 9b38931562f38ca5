package org.tpurt;

/** Status code 1 (TensorFlow's CancelledError). */
public class CancelledError extends OpError {
  public CancelledError(String message) {
    super(1, message);
  }
}
