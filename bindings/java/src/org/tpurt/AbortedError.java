package org.tpurt;

/** Status code 10 (TensorFlow's AbortedError). */
public class AbortedError extends OpError {
  public AbortedError(String message) {
    super(10, message);
  }
}
