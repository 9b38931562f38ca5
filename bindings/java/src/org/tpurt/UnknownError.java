package org.tpurt;

/** Status code 2 (TensorFlow's UnknownError). */
public class UnknownError extends OpError {
  public UnknownError(String message) {
    super(2, message);
  }
}
